//! What the run-time kernel compilers (NVRTC, hiprtc) are given: a
//! [`Program`], and its text as the C strings their calls take.

use std::ffi::{c_char, c_int, CString};

use crate::error::{Error, Result};

/// A kernel program to compile at run time.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// The program text.
    pub code: &'a str,
    /// A name for logs and error messages (`gpuport_builtins.cu`).
    pub name: &'a str,
    /// Compiler options.
    pub options: &'a [&'a str],
    /// `(include name, contents)` pairs the program may `#include`.
    pub headers: &'a [(&'a str, &'a str)],
}

/// A [`Program`] as NUL-terminated strings and arrays of pointers to them,
/// in the shape `nvrtcCreateProgram`/`hiprtcCreateProgram` and
/// `nvrtcCompileProgram`/`hiprtcCompileProgram` take them. Every pointer is
/// valid while this value is.
pub struct ProgramText {
    code: CString,
    name: CString,
    // The strings behind the pointer arrays, kept alive with them.
    _owned: [Vec<CString>; 3],
    headers: Vec<*const c_char>,
    include_names: Vec<*const c_char>,
    options: Vec<*const c_char>,
    /// `headers.len()` and `options.len()` as the C ints the compilers take.
    header_count: c_int,
    option_count: c_int,
}

/// `len` items as the C int count the compilers take, or the error naming
/// `what` where there are more than a C int counts.
fn c_count(what: &'static str, len: usize) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| Error::InvalidArgument {
        name: what,
        reason: format!("{len} of them; the compiler takes at most {}", c_int::MAX),
    })
}

/// `items` as C strings, or the error naming `what` holds a NUL byte.
fn c_strings<'a>(what: &'static str, items: impl Iterator<Item = &'a str>) -> Result<Vec<CString>> {
    items
        .map(CString::new)
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::InvalidArgument { name: what, reason: format!("{what} contains a NUL byte") })
}

impl ProgramText {
    /// The program's strings. A NUL byte inside any of them, or more headers
    /// or options than a C int counts, is an [`Error::InvalidArgument`]
    /// naming which.
    pub fn new(program: &Program<'_>) -> Result<Self> {
        let header_count = c_count("headers", program.headers.len())?;
        let option_count = c_count("options", program.options.len())?;
        let one = |what, text: &str| c_strings(what, std::iter::once(text)).map(|mut v| v.remove(0));
        let code = one("code", program.code)?;
        let name = one("name", program.name)?;
        let texts = c_strings("header", program.headers.iter().map(|(_, text)| *text))?;
        let names = c_strings("header name", program.headers.iter().map(|(name, _)| *name))?;
        let opts = c_strings("option", program.options.iter().copied())?;
        let pointers = |v: &[CString]| v.iter().map(|c| c.as_ptr()).collect::<Vec<_>>();
        let (headers, include_names, options) = (pointers(&texts), pointers(&names), pointers(&opts));
        Ok(ProgramText {
            code,
            name,
            _owned: [texts, names, opts],
            headers,
            include_names,
            options,
            header_count,
            option_count,
        })
    }

    /// The program text.
    pub fn code(&self) -> *const c_char {
        self.code.as_ptr()
    }

    /// The program's name.
    pub fn name(&self) -> *const c_char {
        self.name.as_ptr()
    }

    /// How many headers [`headers`](Self::headers) and
    /// [`include_names`](Self::include_names) hold.
    pub fn header_count(&self) -> c_int {
        self.header_count
    }

    /// The headers' contents.
    pub fn headers(&self) -> *const *const c_char {
        self.headers.as_ptr()
    }

    /// The headers' include names, in the same order.
    pub fn include_names(&self) -> *const *const c_char {
        self.include_names.as_ptr()
    }

    /// How many options [`options`](Self::options) holds.
    pub fn option_count(&self) -> c_int {
        self.option_count
    }

    /// The compiler options.
    pub fn options(&self) -> *const *const c_char {
        self.options.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_byte_is_an_error_naming_where() {
        let program = Program { code: "k", name: "k.cu", options: &[], headers: &[("a.h", "x\0y")] };
        match ProgramText::new(&program) {
            Err(Error::InvalidArgument { name, .. }) => assert_eq!(name, "header"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        let bad_option = Program { headers: &[], options: &["-O3\0"], ..program };
        assert!(matches!(ProgramText::new(&bad_option), Err(Error::InvalidArgument { name: "option", .. })));
    }

    #[test]
    fn counts_past_a_c_int_are_an_error_not_a_wrap() {
        assert_eq!(c_count("options", 3).unwrap(), 3);
        let max = usize::try_from(c_int::MAX).unwrap();
        assert_eq!(c_count("options", max).unwrap(), c_int::MAX);
        let past = max + 1;
        assert!(matches!(c_count("options", past), Err(Error::InvalidArgument { name: "options", .. })));
        assert!(matches!(c_count("headers", usize::MAX), Err(Error::InvalidArgument { name: "headers", .. })));
    }
}
