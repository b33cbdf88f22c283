//! A reader of the pickle opcodes that plain containers use (protocols 2
//! to 5: `None`, booleans, integers, floats, strings, bytes, lists, tuples,
//! dicts, the memo): enough for a memory snapshot, gpuport's or PyTorch's
//! (`pickle.dump` of `torch.cuda.memory._snapshot()`). Anything else (a
//! class, a reduce) is refused with the opcode named.

/// A value read from a pickle.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer (up to 128 bits).
    Int(i128),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A dict, in insertion order.
    Dict(Vec<(Value, Value)>),
}

impl Value {
    /// The value under the string key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The items of a list or tuple (empty for anything else).
    pub fn items(&self) -> &[Value] {
        match self {
            Value::List(v) | Value::Tuple(v) => v,
            _ => &[],
        }
    }

    /// An integer as `i128`.
    pub fn int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i128::from(*b)),
            _ => None,
        }
    }

    /// A string.
    pub fn str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len()).ok_or("the pickle ends early")?;
        let s = &self.data[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn le<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    fn len32(&mut self) -> Result<usize, String> {
        usize::try_from(u32::from_le_bytes(self.le()?)).map_err(|e| e.to_string())
    }
    fn len64(&mut self) -> Result<usize, String> {
        usize::try_from(u64::from_le_bytes(self.le()?)).map_err(|e| e.to_string())
    }
    fn string(&mut self, n: usize) -> Result<String, String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| format!("a string is not UTF-8: {e}"))
    }
}

/// Little-endian two's complement bytes (LONG1, LONG4) as an integer.
fn long(bytes: &[u8]) -> Result<i128, String> {
    if bytes.len() > 16 {
        return Err(format!("an integer of {} bytes is too large", bytes.len()));
    }
    let fill = if bytes.last().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
    let mut full = [fill; 16];
    full[..bytes.len()].copy_from_slice(bytes);
    Ok(i128::from_le_bytes(full))
}

/// Reads one pickled value.
pub fn load(data: &[u8]) -> Result<Value, String> {
    let mut r = Reader { data, at: 0 };
    let mut stack: Vec<Value> = Vec::new();
    let mut marks: Vec<usize> = Vec::new();
    let mut memo: Vec<Option<Value>> = Vec::new();
    let pop = |stack: &mut Vec<Value>| stack.pop().ok_or_else(|| "the pickle's stack is empty".to_string());
    let since_mark = |stack: &mut Vec<Value>, marks: &mut Vec<usize>| -> Result<Vec<Value>, String> {
        let m = marks.pop().ok_or("no MARK")?;
        if m > stack.len() {
            return Err("a MARK past the stack".into());
        }
        Ok(stack.split_off(m))
    };
    let put = |memo: &mut Vec<Option<Value>>, i: usize, v: Value| {
        if memo.len() <= i {
            memo.resize(i + 1, None);
        }
        memo[i] = Some(v);
    };
    loop {
        let op = r.u8()?;
        match op {
            0x80 => {
                r.u8()?; // protocol
            }
            0x95 => {
                r.len64()?; // FRAME: its length only
            }
            b'.' => return pop(&mut stack),
            b'(' => marks.push(stack.len()),
            b'}' => stack.push(Value::Dict(Vec::new())),
            b']' => stack.push(Value::List(Vec::new())),
            b')' => stack.push(Value::Tuple(Vec::new())),
            b't' => {
                let items = since_mark(&mut stack, &mut marks)?;
                stack.push(Value::Tuple(items));
            }
            b'l' => {
                let items = since_mark(&mut stack, &mut marks)?;
                stack.push(Value::List(items));
            }
            b'd' => {
                let items = since_mark(&mut stack, &mut marks)?;
                stack.push(Value::Dict(pairs(items)?));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if stack.len() < n {
                    return Err("a TUPLE past the stack".into());
                }
                let items = stack.split_off(stack.len() - n);
                stack.push(Value::Tuple(items));
            }
            b'a' => {
                let v = pop(&mut stack)?;
                match stack.last_mut() {
                    Some(Value::List(l)) => l.push(v),
                    _ => return Err("APPEND to something not a list".into()),
                }
            }
            b'e' => {
                let items = since_mark(&mut stack, &mut marks)?;
                match stack.last_mut() {
                    Some(Value::List(l)) => l.extend(items),
                    _ => return Err("APPENDS to something not a list".into()),
                }
            }
            b's' => {
                let v = pop(&mut stack)?;
                let k = pop(&mut stack)?;
                match stack.last_mut() {
                    Some(Value::Dict(d)) => d.push((k, v)),
                    _ => return Err("SETITEM on something not a dict".into()),
                }
            }
            b'u' => {
                let items = pairs(since_mark(&mut stack, &mut marks)?)?;
                match stack.last_mut() {
                    Some(Value::Dict(d)) => d.extend(items),
                    _ => return Err("SETITEMS on something not a dict".into()),
                }
            }
            b'N' => stack.push(Value::None),
            0x88 => stack.push(Value::Bool(true)),
            0x89 => stack.push(Value::Bool(false)),
            b'J' => stack.push(Value::Int(i128::from(i32::from_le_bytes(r.le()?)))),
            b'K' => stack.push(Value::Int(i128::from(r.u8()?))),
            b'M' => stack.push(Value::Int(i128::from(u16::from_le_bytes(r.le()?)))),
            0x8a => {
                let n = usize::from(r.u8()?);
                stack.push(Value::Int(long(r.take(n)?)?));
            }
            0x8b => {
                let n = r.len32()?;
                stack.push(Value::Int(long(r.take(n)?)?));
            }
            b'G' => stack.push(Value::Float(f64::from_be_bytes(r.le()?))),
            b'X' => {
                let n = r.len32()?;
                stack.push(Value::Str(r.string(n)?));
            }
            0x8c => {
                let n = usize::from(r.u8()?);
                stack.push(Value::Str(r.string(n)?));
            }
            0x8d => {
                let n = r.len64()?;
                stack.push(Value::Str(r.string(n)?));
            }
            b'C' => {
                let n = usize::from(r.u8()?);
                stack.push(Value::Bytes(r.take(n)?.to_vec()));
            }
            b'B' => {
                let n = r.len32()?;
                stack.push(Value::Bytes(r.take(n)?.to_vec()));
            }
            0x94 => {
                let v = stack.last().cloned().ok_or("MEMOIZE of an empty stack")?;
                let i = memo.len();
                put(&mut memo, i, v);
            }
            b'q' | b'r' => {
                let i = if op == b'q' { usize::from(r.u8()?) } else { r.len32()? };
                let v = stack.last().cloned().ok_or("PUT of an empty stack")?;
                put(&mut memo, i, v);
            }
            b'h' | b'j' => {
                let i = if op == b'h' { usize::from(r.u8()?) } else { r.len32()? };
                let v = memo.get(i).cloned().flatten().ok_or_else(|| format!("GET of memo {i}, never PUT"))?;
                stack.push(v);
            }
            b'0' => {
                pop(&mut stack)?;
            }
            other => return Err(format!("pickle opcode {other:#04x} at byte {} is not one of plain data", r.at - 1)),
        }
    }
}

fn pairs(items: Vec<Value>) -> Result<Vec<(Value, Value)>, String> {
    if !items.len().is_multiple_of(2) {
        return Err("a dict with a key and no value".into());
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protocol_4_pickle_of_python_reads_back() {
        // pickle.dumps({'a': [1, 300, 70000, 2**40, -1], 'b': ('x', None, True), 'c': 1.5}, protocol=4)
        let data: &[u8] = b"\x80\x04\x95=\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01M,\x01Jp\x11\x01\x00\x8a\x06\x00\x00\x00\x00\x00\x01J\xff\xff\xff\xffe\x8c\x01b\x94\x8c\x01x\x94N\x88\x87\x94\x8c\x01c\x94G?\xf8\x00\x00\x00\x00\x00\x00u.";
        let v = load(data).unwrap();
        let a: Vec<i128> = v.get("a").unwrap().items().iter().map(|x| x.int().unwrap()).collect();
        assert_eq!(a, [1, 300, 70000, 1 << 40, -1]);
        assert_eq!(v.get("b"), Some(&Value::Tuple(vec![Value::Str("x".into()), Value::None, Value::Bool(true)])));
        assert_eq!(v.get("c"), Some(&Value::Float(1.5)));
    }

    #[test]
    fn a_class_or_a_cut_pickle_is_refused() {
        assert!(load(b"\x80\x02cos\nsystem\n.").unwrap_err().contains("0x63"));
        assert!(load(b"\x80\x02]").unwrap_err().contains("ends early"));
    }
}
