//! A writer of the few pickle opcodes a snapshot needs (protocol 2:
//! booleans, integers, strings, lists, tuples, dicts with string
//! keys), which Python's `pickle.load` reads as plain containers.

/// A value to pickle.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Bool(bool),
    Int(i128),
    Str(String),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(&'static str, Value)>),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i128::from(v))
    }
}

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        // usize is at most 64 bits on every target gpuport builds for.
        Value::Int(i128::try_from(v).unwrap_or(i128::MAX))
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(i128::from(v))
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const BINUNICODE: u8 = b'X';
const EMPTY_LIST: u8 = b']';
const EMPTY_DICT: u8 = b'}';
const MARK: u8 = b'(';
const APPENDS: u8 = b'e';
const SETITEMS: u8 = b'u';
const TUPLE: u8 = b't';

/// `value` as a protocol-2 pickle.
pub(super) fn to_pickle(value: &Value) -> Vec<u8> {
    let mut out = vec![PROTO, 2];
    write(&mut out, value);
    out.push(STOP);
    out
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(BINUNICODE);
    // A snapshot's strings (file and function names) are far below 4 GiB.
    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

fn write(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(b) => out.push(if *b { NEWTRUE } else { NEWFALSE }),
        Value::Int(i) => match i32::try_from(*i) {
            Ok(small) => {
                out.push(BININT);
                out.extend_from_slice(&small.to_le_bytes());
            }
            Err(_) => {
                // LONG1: the shortest little-endian two's complement form.
                let bytes = i.to_le_bytes();
                let mut n = bytes.len();
                while n > 1 {
                    let (top, next) = (bytes[n - 1], bytes[n - 2]);
                    let redundant = (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0);
                    if !redundant {
                        break;
                    }
                    n -= 1;
                }
                out.push(LONG1);
                out.push(u8::try_from(n).unwrap_or(16)); // n <= 16
                out.extend_from_slice(&bytes[..n]);
            }
        },
        Value::Str(s) => write_str(out, s),
        Value::List(items) => {
            out.push(EMPTY_LIST);
            if !items.is_empty() {
                out.push(MARK);
                items.iter().for_each(|v| write(out, v));
                out.push(APPENDS);
            }
        }
        Value::Tuple(items) => {
            out.push(MARK);
            items.iter().for_each(|v| write(out, v));
            out.push(TUPLE);
        }
        Value::Dict(items) => {
            out.push(EMPTY_DICT);
            if !items.is_empty() {
                out.push(MARK);
                for (k, v) in items {
                    write_str(out, k);
                    write(out, v);
                }
                out.push(SETITEMS);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_the_shortest_form() {
        assert_eq!(to_pickle(&Value::Int(5)), vec![PROTO, 2, BININT, 5, 0, 0, 0, STOP]);
        // 2^31 needs 5 bytes: 00 00 00 80 00.
        assert_eq!(to_pickle(&Value::Int(1 << 31)), vec![PROTO, 2, LONG1, 5, 0, 0, 0, 0x80, 0, STOP]);
        assert_eq!(to_pickle(&Value::Int(-(1 << 40))), vec![PROTO, 2, LONG1, 6, 0, 0, 0, 0, 0, 0xff, STOP]);
    }

    #[test]
    fn containers_use_marks_only_when_not_empty() {
        let v = Value::Dict(vec![("a", Value::List(vec![])), ("b", Value::Tuple(vec![Value::Bool(true)]))]);
        let p = to_pickle(&v);
        assert_eq!(
            p,
            [
                &[PROTO, 2, EMPTY_DICT, MARK, BINUNICODE, 1, 0, 0, 0, b'a', EMPTY_LIST][..],
                &[BINUNICODE, 1, 0, 0, 0, b'b', MARK, NEWTRUE, TUPLE, SETITEMS, STOP][..]
            ]
            .concat()
        );
    }
}
