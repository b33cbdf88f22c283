"""``python -m gpuport`` (and the ``gpuport`` console script): the device report.

    $ python -m gpuport
    gpuport 0.1.0
    host: 1 device(s)
      host  ...
    cuda: unavailable: could not load libcuda (tried ...)
    rocm: unavailable: could not load libamdhip64 (tried ...)
"""

import sys


def main(argv: "list[str] | None" = None) -> int:
    """Prints which backends load, why the others do not, and every device."""
    import gpuport

    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--version":
        print(f"gpuport {gpuport.__version__}")
        return 0
    if args and args[0] not in ("info", "-h", "--help"):
        print(f"gpuport: unknown command {args[0]!r}; the Python package runs 'info' "
              "(the Rust command `gpuport` has the others: demo, bench)", file=sys.stderr)
        return 2
    if args and args[0] in ("-h", "--help"):
        print("usage: python -m gpuport [info | --version]\n\nReports each backend (loaded or not, and why) and its devices.")
        return 0
    gpuport.show_config()
    return 0


if __name__ == "__main__":
    sys.exit(main())
