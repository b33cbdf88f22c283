/* A shared library that is not the HIP runtime: it loads, but exports none
 * of HIP's calls. tests/test_library_search.py points GPUPORT_HIP_LIBRARY at
 * it to check that the ROCm backend is then unavailable, naming the
 * missing symbols, without a panic. */
int gpuport_not_hip(void) { return 0; }
