//! Path segments as OpenBao stores them (the module doc of
//! [`super`]: paths are data, never syntax).

/// True for the RFC 3986 unreserved characters, kept as they are in a name.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The name OpenBao stores for a path segment holding `value`: the
/// unreserved characters `A-Z a-z 0-9 - . _ ~` as they are, every other
/// byte of its UTF-8 as `%XX` (upper-case hex). `None` for `""`, `.` and
/// `..`, which cannot be a segment. Different values always get different
/// names, and no name holds `/`.
pub fn escape_segment(value: &str) -> Option<String> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if matches!(value, "" | "." | "..") {
        return None;
    }
    let mut name = String::with_capacity(value.len());
    for &b in value.as_bytes() {
        if unreserved(b) {
            name.push(b as char);
        } else {
            name.extend(['%', HEX[usize::from(b >> 4)] as char, HEX[usize::from(b & 15)] as char]);
        }
    }
    Some(name)
}

/// The value whose [`escape_segment`] name is `name`; `None` when no value
/// has that name (a name Slipway did not write, such as `a b` or `%41`).
pub fn unescape_segment(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut value = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: u8| match b {
                b'0'..=b'9' => Some(b - b'0'),
                b'A'..=b'F' => Some(b - b'A' + 10),
                _ => None,
            };
            let high = hex(*bytes.get(i + 1)?)?;
            let low = hex(*bytes.get(i + 2)?)?;
            value.push(high << 4 | low);
            i += 3;
        } else if unreserved(bytes[i]) {
            value.push(bytes[i]);
            i += 1;
        } else {
            return None;
        }
    }
    let value = String::from_utf8(value).ok()?;
    (escape_segment(&value)? == name).then_some(value)
}
