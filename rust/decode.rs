//! The fast path of decoding a stored message record (`stores/serializer.py::_fast_message`):
//! a strict JSON parser over the record's bytes and the checks of every field.
//!
//! It answers only for records it is sure of: valid UTF-8 JSON as Python's `json.loads`
//! reads it (same numbers, same strings, no lone surrogate, no NaN or Infinity), one message
//! object of a known tag, every field of the right type and value. Anything else is `None`,
//! and the caller decodes the record on the checked path, which writes the error. So this code
//! never has to say *why* a record is bad, only never accept one the checked path refuses.

use std::borrow::Cow;

/// Deeper values are left to the checked path (Python's parser allows far more).
pub const MAX_DEPTH: usize = 128;

/// A JSON value as `json.loads` gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer literal outside `i64` (Python makes an int of any size).
    BigInt(&'a str),
    Float(f64),
    Str(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    /// Members in order; a repeated key is kept (Python's dict keeps the last value at the
    /// first key's place, as a dict built member by member does).
    Object(Vec<(Cow<'a, str>, Value<'a>)>),
}

/// The one JSON value of `data`, or `None` for anything `json.loads` might read otherwise.
pub fn parse(data: &[u8]) -> Option<Value<'_>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    (parser.pos == parser.bytes.len()).then_some(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn literal(&mut self, word: &str, value: Value<'a>) -> Option<Value<'a>> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Some(value)
        } else {
            None
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value<'a>> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(Value::Str),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(Value::Object(members));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            self.skip_ws();
            members.push((key, self.value(depth)?));
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                b'}' => {
                    self.pos += 1;
                    return Some(Value::Object(members));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Value<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                }
                b']' => {
                    self.pos += 1;
                    return Some(Value::Array(items));
                }
                _ => return None,
            }
        }
    }

    /// A string at `"`: borrowed when it has no escape. A raw control character, a bad
    /// escape or a lone surrogate (`\ud800` not followed by its low half) is `None`.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.pos += 1;
        let start = self.pos;
        loop {
            match *self.bytes.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(Cow::Borrowed(&self.text[start..self.pos - 1]));
                }
                b'\\' => break,
                0..=0x1f => return None,
                _ => self.pos += 1,
            }
        }
        // The bytes stopped at are ASCII, so every slice below is on a char boundary.
        let mut out = String::with_capacity(self.pos - start + 16);
        out.push_str(&self.text[start..self.pos]);
        loop {
            match *self.bytes.get(self.pos)? {
                b'"' => {
                    self.pos += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    let escape = *self.bytes.get(self.pos + 1)?;
                    self.pos += 2;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => {
                    let run = self.pos;
                    while let Some(&byte) = self.bytes.get(self.pos) {
                        if byte == b'"' || byte == b'\\' || byte < 0x20 {
                            break;
                        }
                        self.pos += 1;
                    }
                    out.push_str(&self.text[run..self.pos]);
                }
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.pos..self.pos + 4)?;
        let mut value = 0;
        for &digit in digits {
            value = value * 16 + char::from(digit).to_digit(16)?;
        }
        self.pos += 4;
        Some(value)
    }

    /// The character of `\uXXXX` (after the `\u`), a surrogate pair read as one character.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.hex4()?;
        if (0xDC00..0xE000).contains(&first) {
            return None;
        }
        if !(0xD800..0xDC00).contains(&first) {
            return char::from_u32(first);
        }
        if self.bytes.get(self.pos..self.pos + 2)? != b"\\u" {
            return None;
        }
        self.pos += 2;
        let second = self.hex4()?;
        if !(0xDC00..0xE000).contains(&second) {
            return None;
        }
        char::from_u32(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
    }

    /// A number as Python's JSON scanner reads one: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`,
    /// an int without fraction or exponent, otherwise a float that must be finite.
    fn number(&mut self) -> Option<Value<'a>> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
            float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
            float = true;
        }
        let literal = &self.text[start..self.pos];
        if float {
            let value: f64 = literal.parse().ok()?;
            return value.is_finite().then_some(Value::Float(value));
        }
        Some(match literal.parse::<i64>() {
            Ok(value) => Value::Int(value),
            Err(_) => Value::BigInt(literal),
        })
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// What the message classes require beyond types, as the Python library defines it
/// (captured from `agentctx_fast.messages` by the binding).
pub struct Rules {
    pub max_inline_bytes: usize,
    pub system_roles: Vec<String>,
    pub image_details: Vec<String>,
}

/// A checked message record.
#[derive(Debug, PartialEq)]
pub struct Record<'a> {
    pub message_id: Cow<'a, str>,
    /// A `Value::Object`.
    pub metadata: Value<'a>,
    pub version: i64,
    pub turn_id: Option<Cow<'a, str>>,
    pub body: Body<'a>,
}

#[derive(Debug, PartialEq)]
pub enum Body<'a> {
    System {
        text: Cow<'a, str>,
        role: Cow<'a, str>,
        name: Option<Cow<'a, str>>,
    },
    User {
        content: Content<'a>,
        name: Option<Cow<'a, str>>,
    },
    Ai {
        text: Option<Cow<'a, str>>,
        tool_calls: Vec<Call<'a>>,
        refusal: Option<Cow<'a, str>>,
        name: Option<Cow<'a, str>>,
        /// prompt, completion and total tokens: each a non-negative `Int` or `BigInt`.
        usage: Option<[Value<'a>; 3]>,
    },
    Tool {
        tool_call_id: Cow<'a, str>,
        text: Cow<'a, str>,
        tool_name: Option<Cow<'a, str>>,
        is_error: bool,
    },
    /// `payload`: None or a `Value::Object`.
    Action { payload: Option<Value<'a>> },
    Form {
        payload: Option<Value<'a>>,
        status: Option<Cow<'a, str>>,
    },
}

#[derive(Debug, PartialEq)]
pub enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Debug, PartialEq)]
pub struct Call<'a> {
    pub id: Cow<'a, str>,
    pub name: Cow<'a, str>,
    pub arguments: Cow<'a, str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Image,
    Audio,
    File,
}

#[derive(Debug, PartialEq)]
pub enum Part<'a> {
    Text(Cow<'a, str>),
    Media {
        kind: MediaKind,
        uri: Option<Cow<'a, str>>,
        mime_type: Option<Cow<'a, str>>,
        name: Option<Cow<'a, str>>,
        /// An `Int` or `BigInt` (any sign: the classes check only the type).
        size_bytes: Option<Value<'a>>,
        data: Option<Vec<u8>>,
        /// Images only.
        detail: Option<Cow<'a, str>>,
    },
}

/// The fields a message record may have; each kind allows some (`ALLOWED`).
const KEYS: [&str; 17] = [
    "type",
    "message_id",
    "metadata",
    "version",
    "turn_id",
    "text",
    "role",
    "name",
    "content",
    "tool_calls",
    "refusal",
    "usage",
    "tool_call_id",
    "tool_name",
    "is_error",
    "payload",
    "status",
];
const COMMON: u32 = 0b11111;

fn mask(names: &[&str]) -> u32 {
    names.iter().fold(COMMON, |bits, name| {
        bits | KEYS
            .iter()
            .position(|key| key == name)
            .map_or(0, |index| 1 << index)
    })
}

/// Takes the members of `object` into slots by `keys`; `None` for an unknown or repeated key.
fn slots<'a, const N: usize>(
    object: Vec<(Cow<'a, str>, Value<'a>)>,
    keys: &[&str; N],
) -> Option<([Option<Value<'a>>; N], u32)> {
    let mut slots: [Option<Value<'a>>; N] = std::array::from_fn(|_| None);
    let mut seen = 0u32;
    for (key, value) in object {
        let index = keys.iter().position(|name| *name == key)?;
        if seen & (1 << index) != 0 {
            return None;
        }
        seen |= 1 << index;
        slots[index] = Some(value);
    }
    Some((slots, seen))
}

fn object(value: Value<'_>) -> Option<Vec<(Cow<'_, str>, Value<'_>)>> {
    match value {
        Value::Object(members) => Some(members),
        _ => None,
    }
}

/// A required str.
fn text(value: Option<Value<'_>>) -> Option<Cow<'_, str>> {
    match value? {
        Value::Str(text) => Some(text),
        _ => None,
    }
}

/// An optional str: absent or null is `Some(None)`.
fn optional_text(value: Option<Value<'_>>) -> Option<Option<Cow<'_, str>>> {
    match value {
        None | Some(Value::Null) => Some(None),
        Some(Value::Str(text)) => Some(Some(text)),
        Some(_) => None,
    }
}

/// An identifier: a str without NUL (a lone surrogate cannot come out of `parse`).
fn identifier(value: Option<Value<'_>>) -> Option<Cow<'_, str>> {
    text(value).filter(|text| !text.contains('\0'))
}

fn optional_identifier(value: Option<Value<'_>>) -> Option<Option<Cow<'_, str>>> {
    match optional_text(value)? {
        Some(text) if text.contains('\0') => None,
        other => Some(other),
    }
}

/// An optional participant name. Only names of printable ASCII are vouched for here (the
/// classes' rule is a Unicode regex); any other name goes to the checked path.
fn participant_name(value: Option<Value<'_>>) -> Option<Option<Cow<'_, str>>> {
    let name = optional_text(value)?;
    if let Some(name) = &name {
        let fine = !name.is_empty()
            && name
                .bytes()
                .all(|b| (0x21..0x7f).contains(&b) && !b"<|\\/>".contains(&b));
        if !fine {
            return None;
        }
    }
    Some(name)
}

fn optional_object(value: Option<Value<'_>>) -> Option<Option<Value<'_>>> {
    match value {
        None | Some(Value::Null) => Some(None),
        Some(object @ Value::Object(_)) => Some(Some(object)),
        Some(_) => None,
    }
}

/// The checked message of a parsed record, or `None`.
pub fn message<'a>(value: Value<'a>, rules: &Rules) -> Option<Record<'a>> {
    let (fields, seen) = slots(object(value)?, &KEYS)?;
    let [kind, message_id, metadata, version, turn_id, text_, role, name, content, tool_calls, refusal, usage, tool_call_id, tool_name, is_error, payload, status] =
        fields;
    let kind = text(kind)?;
    let allowed = match &*kind {
        "system" => mask(&["text", "role", "name"]),
        "user" => mask(&["content", "name"]),
        "ai" => mask(&["text", "tool_calls", "refusal", "name", "usage"]),
        "tool" => mask(&["tool_call_id", "text", "tool_name", "is_error"]),
        "action" => mask(&["payload"]),
        "form" => mask(&["payload", "status"]),
        _ => return None,
    };
    if seen & !allowed != 0 {
        return None;
    }
    let message_id = identifier(message_id)?;
    let metadata = match metadata? {
        object @ Value::Object(_) => object,
        _ => return None,
    };
    let version = match version? {
        Value::Int(version) if version >= 0 => version,
        _ => return None,
    };
    let turn_id = optional_identifier(turn_id)?;
    let body = match &*kind {
        "system" => {
            let role = match role {
                None => Cow::Borrowed("system"),
                some => text(some)?,
            };
            if !rules.system_roles.iter().any(|known| *known == role) {
                return None;
            }
            Body::System {
                text: text(text_)?,
                role,
                name: participant_name(name)?,
            }
        }
        "user" => Body::User {
            content: match content? {
                Value::Str(text) => Content::Text(text),
                Value::Array(items) => Content::Parts(
                    items
                        .into_iter()
                        .map(|item| part(item, rules))
                        .collect::<Option<_>>()?,
                ),
                _ => return None,
            },
            name: participant_name(name)?,
        },
        "ai" => Body::Ai {
            text: optional_text(text_)?,
            tool_calls: match tool_calls? {
                Value::Array(calls) => calls.into_iter().map(call).collect::<Option<_>>()?,
                _ => return None,
            },
            refusal: optional_text(refusal)?,
            name: participant_name(name)?,
            usage: match usage {
                None | Some(Value::Null) => None,
                Some(value) => Some(self::usage(value)?),
            },
        },
        "tool" => Body::Tool {
            tool_call_id: identifier(tool_call_id)?,
            text: text(text_)?,
            tool_name: optional_identifier(tool_name)?,
            is_error: match is_error? {
                Value::Bool(flag) => flag,
                _ => return None,
            },
        },
        "action" => Body::Action {
            payload: optional_object(payload)?,
        },
        _ => Body::Form {
            payload: optional_object(payload)?,
            status: optional_text(status)?,
        },
    };
    Some(Record {
        message_id,
        metadata,
        version,
        turn_id,
        body,
    })
}

fn call(value: Value<'_>) -> Option<Call<'_>> {
    let (fields, seen) = slots(object(value)?, &["id", "name", "arguments"])?;
    if seen != 0b111 {
        return None;
    }
    let [id, name, arguments] = fields;
    Some(Call {
        id: identifier(id)?,
        name: identifier(name)?,
        arguments: text(arguments)?,
    })
}

fn count(value: Option<Value<'_>>) -> Option<Value<'_>> {
    match value? {
        count @ Value::Int(0..) => Some(count),
        Value::BigInt(literal) if !literal.starts_with('-') => Some(Value::BigInt(literal)),
        _ => None,
    }
}

fn usage(value: Value<'_>) -> Option<[Value<'_>; 3]> {
    let keys = ["prompt_tokens", "completion_tokens", "total_tokens"];
    let (fields, seen) = slots(object(value)?, &keys)?;
    if seen != 0b111 {
        return None;
    }
    let [prompt, completion, total] = fields;
    Some([count(prompt)?, count(completion)?, count(total)?])
}

fn part<'a>(value: Value<'a>, rules: &Rules) -> Option<Part<'a>> {
    const PART_KEYS: [&str; 8] = [
        "type",
        "text",
        "uri",
        "mime_type",
        "name",
        "size_bytes",
        "data",
        "detail",
    ];
    let (fields, seen) = slots(object(value)?, &PART_KEYS)?;
    let [kind, text_, uri, mime_type, name, size_bytes, data, detail] = fields;
    let kind = text(kind)?;
    let (kind, allowed) = match &*kind {
        "text" => return (seen == 0b11).then_some(Part::Text(text(text_)?)),
        "image" => (MediaKind::Image, 0b1111_1101),
        "audio" => (MediaKind::Audio, 0b0111_1101),
        "file" => (MediaKind::File, 0b0111_1101),
        _ => return None,
    };
    if seen & !allowed != 0 {
        return None;
    }
    let uri = optional_text(uri)?;
    let data = match optional_text(data)? {
        None => {
            uri.as_ref()?;
            None
        }
        Some(encoded) => {
            let bytes = base64(encoded.as_bytes())?;
            if bytes.len() > rules.max_inline_bytes {
                return None;
            }
            Some(bytes)
        }
    };
    let detail = optional_text(detail)?;
    if let Some(detail) = &detail {
        if !rules.image_details.iter().any(|known| known == detail) {
            return None;
        }
    }
    Some(Part::Media {
        kind,
        uri,
        mime_type: optional_text(mime_type)?,
        name: optional_text(name)?,
        size_bytes: match size_bytes {
            None | Some(Value::Null) => None,
            Some(size @ (Value::Int(_) | Value::BigInt(_))) => Some(size),
            Some(_) => return None,
        },
        data,
        detail,
    })
}

/// Canonical base64 (what `base64.b64encode` writes): length a multiple of 4, the standard
/// alphabet, at most two `=` at the end and zero bits under them. Anything else is `None`
/// (Python's decoder accepts some other forms; the checked path decides those).
pub fn base64(encoded: &[u8]) -> Option<Vec<u8>> {
    fn sextet(byte: u8) -> Option<u32> {
        Some(match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    if !encoded.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(encoded.len() / 4 * 3);
    let quads = encoded.len() / 4;
    for (index, quad) in encoded.chunks_exact(4).enumerate() {
        let last = index + 1 == quads;
        let padding = if last {
            quad.iter().rev().take_while(|&&b| b == b'=').count()
        } else {
            0
        };
        if padding > 2 {
            return None;
        }
        let mut bits = 0u32;
        for &byte in &quad[..4 - padding] {
            bits = bits << 6 | sextet(byte)?;
        }
        bits <<= 6 * padding;
        let bytes = [(bits >> 16) as u8, (bits >> 8) as u8, bits as u8];
        let kept = 3 - padding;
        if bits & ((1 << (8 * padding)) - 1) != 0 {
            return None; // non-zero bits under the padding
        }
        out.extend_from_slice(&bytes[..kept]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            max_inline_bytes: 8,
            system_roles: vec!["system".into(), "developer".into()],
            image_details: vec!["auto".into(), "low".into()],
        }
    }

    fn record(json: &str) -> Option<Record<'_>> {
        message(parse(json.as_bytes())?, &rules())
    }

    #[test]
    fn parses_what_json_loads_reads() {
        let value = parse(br#" {"a": [1, -0, 2.5e1, "x\u00e9\ud83d\ude00\n", true, null, {}]} "#);
        let Some(Value::Object(members)) = value else {
            panic!("not an object")
        };
        assert_eq!(members[0].0, "a");
        assert_eq!(
            members[0].1,
            Value::Array(vec![
                Value::Int(1),
                Value::Int(0),
                Value::Float(25.0),
                Value::Str("xé\u{1F600}\n".into()),
                Value::Bool(true),
                Value::Null,
                Value::Object(vec![]),
            ])
        );
        assert_eq!(
            parse(b"123456789012345678901234567890"),
            Some(Value::BigInt("123456789012345678901234567890"))
        );
    }

    #[test]
    fn refuses_what_it_is_not_sure_of() {
        for bad in [
            &b""[..],
            b"{",
            b"[1,]",
            b"{\"a\":1,}",
            b"01",
            b"1.",
            b"1e",
            b"-",
            b"NaN",
            b"Infinity",
            b"1e400",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"\\ud800\\u0041\"",
            b"\"\\x\"",
            b"\"a\nb\"",
            b"\xef\xbb\xbf{}",
            b"\xed\xa0\x80",
            b"{} {}",
            b"truex",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(parse(deep.as_bytes()), None);
        let fine = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(fine.as_bytes()).is_some());
    }

    #[test]
    fn checks_message_fields() {
        let good = r#"{"type":"tool","message_id":"m","metadata":{},"version":3,"turn_id":null,"text":"t","tool_call_id":"c","tool_name":"n","is_error":false}"#;
        let checked = record(good).expect("a valid record");
        assert_eq!(checked.version, 3);
        assert!(matches!(
            checked.body,
            Body::Tool {
                is_error: false,
                ..
            }
        ));
        for (from, to) in [
            (r#""version":3"#, r#""version":-1"#),
            (r#""version":3"#, r#""version":true"#),
            (r#""version":3"#, r#""version":3.0"#),
            (r#""message_id":"m""#, r#""message_id":"m\u0000""#),
            (r#""is_error":false"#, r#""is_error":0"#),
            (r#""type":"tool""#, r#""type":"Tool""#),
            (r#""type":"tool""#, r#""type":"tool","type":"tool""#),
            (r#""text":"t""#, r#""text":"t","role":"system""#),
            (r#""metadata":{}"#, r#""metadata":[]"#),
        ] {
            let bad = good.replace(from, to);
            assert_ne!(bad, good);
            assert_eq!(record(&bad), None, "{bad}");
        }
    }

    #[test]
    fn checks_names_roles_parts_and_usage() {
        let system = r#"{"type":"system","message_id":"s","metadata":{},"version":0,"text":"x","role":"ROLE","name":"NAME"}"#;
        let with = |role: &str, name: &str| system.replace("ROLE", role).replace("NAME", name);
        assert!(record(&with("developer", "bot_1")).is_some());
        assert!(record(&with("user", "bot")).is_none());
        assert!(record(&with("system", "a b")).is_none());
        assert!(record(&with("system", "a<b")).is_none());
        assert!(record(&with("system", "é")).is_none()); // left to the checked path
        let user = r#"{"type":"user","message_id":"u","metadata":{},"version":0,"content":[PART]}"#;
        let part = |p: &str| user.replace("PART", p);
        assert!(record(&part(r#"{"type":"image","uri":"s3://x","detail":"low"}"#)).is_some());
        assert!(record(&part(r#"{"type":"image","uri":"s3://x","detail":"huge"}"#)).is_none());
        assert!(record(&part(r#"{"type":"audio","uri":"s3://x","detail":"low"}"#)).is_none());
        assert!(record(&part(r#"{"type":"file","uri":null}"#)).is_none());
        assert!(record(&part(r#"{"type":"file","data":"AAEC"}"#)).is_some());
        assert!(record(&part(r#"{"type":"file","data":"AAECAwQFBgcI"}"#)).is_none()); // 9 > cap
        assert!(record(&part(r#"{"type":"text","text":"x","uri":"y"}"#)).is_none());
        assert!(record(&part(r#"{"type":"file","uri":"u","size_bytes":true}"#)).is_none());
        let ai = r#"{"type":"ai","message_id":"a","metadata":{},"version":0,"tool_calls":[],"usage":USAGE}"#;
        let usage = |u: &str| ai.replace("USAGE", u);
        let counts = r#"{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}"#;
        assert!(record(&usage(counts)).is_some());
        assert!(record(&usage(&counts.replace('2', "-2"))).is_none());
        assert!(record(&usage(r#"{"prompt_tokens":1,"completion_tokens":2}"#)).is_none());
    }

    #[test]
    fn base64_is_canonical_only() {
        assert_eq!(base64(b""), Some(vec![]));
        assert_eq!(base64(b"AAE="), Some(vec![0, 1]));
        assert_eq!(base64(b"AA=="), Some(vec![0]));
        assert_eq!(base64(b"/+8="), Some(vec![0xff, 0xef]));
        for bad in [
            &b"AAE"[..],
            b"AB==",
            b"AAF=",
            b"A===",
            b"AA=A",
            b"AAE=AAE=",
            b"AA E",
            b"AAE=\n",
        ] {
            assert_eq!(base64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
