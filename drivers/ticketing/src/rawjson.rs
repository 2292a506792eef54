//! Cutting values out of JSON text without re-printing them, so what the sender wrote is kept
//! byte for byte. Only for text `serde_json` has already accepted: on anything else these
//! return what they could read, never panic.

/// The members of the object `text` holds, in order: (key, the value's text).
pub fn members(text: &str) -> Vec<(String, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return out;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return out;
        }
        let Some(key_end) = skip_string(b, i) else {
            return out;
        };
        let Ok(key) = serde_json::from_str::<String>(&text[i..key_end]) else {
            return out;
        };
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return out;
        }
        let start = skip_ws(b, i + 1);
        let Some(end) = skip_value(b, start) else {
            return out;
        };
        out.push((key, &text[start..end]));
        i = skip_ws(b, end);
        if b.get(i) != Some(&b',') {
            return out;
        }
        i += 1;
    }
}

/// The text of member `key` of the object `text` holds (the last, as JSON parsers take).
pub fn member<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    members(text)
        .into_iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// The elements of the array `text` holds, as text.
pub fn elements(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'[') {
        return out;
    }
    i += 1;
    loop {
        let start = skip_ws(b, i);
        if b.get(start) == Some(&b']') {
            return out;
        }
        let Some(end) = skip_value(b, start) else {
            return out;
        };
        out.push(&text[start..end]);
        i = skip_ws(b, end);
        if b.get(i) != Some(&b',') {
            return out;
        }
        i += 1;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// From an opening quote to just past its closing quote.
fn skip_string(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// From a value's first byte to just past its end.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_cut_out_as_written() {
        let text = r#" { "a" : {"x":"}\"]","y":[1, 2.50e3]} , "b\u0041":-0.0,"c":[{}],"a":true } "#;
        let m = members(text);
        let keys: Vec<&str> = m.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "bA", "c", "a"]);
        assert_eq!(m[0].1, r#"{"x":"}\"]","y":[1, 2.50e3]}"#);
        assert_eq!(m[1].1, "-0.0");
        assert_eq!(member(text, "a"), Some("true"));
        assert_eq!(
            elements(r#"[ {"k":[1]}, "s" ,3 ]"#),
            [r#"{"k":[1]}"#, r#""s""#, "3"]
        );
        assert!(elements("[]").is_empty() && members("{}").is_empty());
    }
}
