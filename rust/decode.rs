//! The fast path of decoding a stored message record (`stores/_decode.py::fast_message`):
//! a strict JSON parser over the record's bytes and the checks of every field, by the record
//! format `stores/_schema.py` declares (a `Schema`, handed over by the binding).
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

/// The kinds of value a field holds, as `stores/_schema.py` names them (`Kind::named`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A str.
    Text,
    /// A str without NUL.
    Id,
    /// A participant name.
    Name,
    /// One of `Schema::system_roles`.
    Role,
    /// One of `Schema::image_details`.
    Detail,
    /// An int from 0 to `i64::MAX`.
    Version,
    /// An int >= 0.
    Count,
    /// Any int.
    Int,
    Bool,
    /// A JSON object.
    Object,
    /// A str, or an array of `Schema::parts` records.
    Content,
    /// An array of `Schema::call` records.
    Calls,
    /// A `Schema::usage` record.
    Usage,
    /// Canonical base64 of at most `Schema::max_inline_bytes` bytes.
    Data,
    /// Provider items: never vouched for here (the checked path checks each one).
    Items,
}

impl Kind {
    /// The kind `stores/_schema.py` calls `name`.
    pub fn named(name: &str) -> Option<Kind> {
        Some(match name {
            "text" => Kind::Text,
            "id" => Kind::Id,
            "name" => Kind::Name,
            "role" => Kind::Role,
            "detail" => Kind::Detail,
            "version" => Kind::Version,
            "count" => Kind::Count,
            "int" => Kind::Int,
            "bool" => Kind::Bool,
            "object" => Kind::Object,
            "content" => Kind::Content,
            "calls" => Kind::Calls,
            "usage" => Kind::Usage,
            "data" => Kind::Data,
            "items" => Kind::Items,
            _ => return None,
        })
    }
}

/// One field of a record type.
#[derive(Debug, Clone)]
pub struct Field {
    pub key: String,
    pub kind: Kind,
    /// Absent is refused (otherwise it reads as the field's default).
    pub required: bool,
    /// `null` reads as None (otherwise it is refused).
    pub nullable: bool,
}

/// One record type: its `"type"` tag (None: nested without one) and its fields.
#[derive(Debug, Clone)]
pub struct RecordType {
    pub tag: Option<String>,
    pub fields: Vec<Field>,
    /// Indices of fields of which at least one must hold a value.
    pub needs_one_of: Vec<usize>,
}

impl RecordType {
    /// A record type whose `needs_one_of` names fields by key (an unknown key is an error).
    pub fn new(
        tag: Option<String>,
        fields: Vec<Field>,
        needs_one_of: &[String],
    ) -> Result<RecordType, String> {
        let index = |key: &String| fields.iter().position(|field| field.key == *key);
        let needs_one_of = needs_one_of
            .iter()
            .map(|key| index(key).ok_or_else(|| format!("no field {key:?}")))
            .collect::<Result<_, _>>()?;
        Ok(RecordType {
            tag,
            fields,
            needs_one_of,
        })
    }
}

/// The record format (`stores/_schema.py`, handed over by the binding) and the values the
/// message classes allow, as the Python library defines them.
#[derive(Debug, Clone)]
pub struct Schema {
    pub messages: Vec<RecordType>,
    pub parts: Vec<RecordType>,
    pub call: RecordType,
    pub usage: RecordType,
    pub max_inline_bytes: usize,
    pub system_roles: Vec<String>,
    pub image_details: Vec<String>,
}

/// A checked record: the index of its type in its group (`Schema::messages` or `parts`; 0 for
/// a call or usage) and a value per field, in the order of its fields.
#[derive(Debug, PartialEq)]
pub struct Record<'a> {
    pub index: usize,
    pub values: Vec<Checked<'a>>,
}

/// A checked field value.
#[derive(Debug, PartialEq)]
pub enum Checked<'a> {
    /// Absent: the field's default.
    Default,
    Null,
    Str(Cow<'a, str>),
    Bool(bool),
    /// An `Int` or `BigInt`, or an `Object`: as `json.loads` makes it.
    Json(Value<'a>),
    Bytes(Vec<u8>),
    /// A usage.
    Record(Record<'a>),
    /// Calls or content parts.
    Records(Vec<Record<'a>>),
}

/// The checked message of a parsed record, or `None`.
pub fn message<'a>(value: Value<'a>, schema: &Schema) -> Option<Record<'a>> {
    tagged(value, &schema.messages, schema)
}

fn object(value: Value<'_>) -> Option<Vec<(Cow<'_, str>, Value<'_>)>> {
    match value {
        Value::Object(members) => Some(members),
        _ => None,
    }
}

/// A record of one of `types`, by its tag (exactly one `"type"` member, a known str).
fn tagged<'a>(value: Value<'a>, types: &[RecordType], schema: &Schema) -> Option<Record<'a>> {
    let members = object(value)?;
    let mut index = None;
    for (key, value) in &members {
        if key == "type" {
            let Value::Str(tag) = value else { return None };
            if index.is_some() {
                return None;
            }
            index = Some(
                types
                    .iter()
                    .position(|kind| kind.tag.as_deref() == Some(&**tag))?,
            );
        }
    }
    let index = index?;
    let values = fields(members, types.get(index)?, schema)?;
    Some(Record { index, values })
}

fn untagged<'a>(value: Value<'a>, kind: &RecordType, schema: &Schema) -> Option<Record<'a>> {
    let values = fields(object(value)?, kind, schema)?;
    Some(Record { index: 0, values })
}

/// The checked fields of a record of type `kind` (its tag already matched); `None` for an
/// unknown or repeated key, a missing required one, or a value `check` refuses.
fn fields<'a>(
    members: Vec<(Cow<'a, str>, Value<'a>)>,
    kind: &RecordType,
    schema: &Schema,
) -> Option<Vec<Checked<'a>>> {
    let mut slots: Vec<Option<Value<'a>>> = kind.fields.iter().map(|_| None).collect();
    for (key, value) in members {
        if kind.tag.is_some() && key == "type" {
            continue;
        }
        let index = kind.fields.iter().position(|field| field.key == key)?;
        let slot = slots.get_mut(index)?;
        if slot.is_some() {
            return None;
        }
        *slot = Some(value);
    }
    let mut values = Vec::with_capacity(slots.len());
    for (field, slot) in kind.fields.iter().zip(slots) {
        values.push(match slot {
            None if field.required => return None,
            None => Checked::Default,
            Some(Value::Null) if field.nullable => Checked::Null,
            Some(Value::Null) => return None,
            Some(value) => check(field.kind, value, schema)?,
        });
    }
    let held = |index: &usize| {
        values
            .get(*index)
            .is_some_and(|value| !matches!(value, Checked::Default | Checked::Null))
    };
    if !kind.needs_one_of.is_empty() && !kind.needs_one_of.iter().any(held) {
        return None;
    }
    Some(values)
}

/// A present, non-null value of `kind`, or `None`.
fn check<'a>(kind: Kind, value: Value<'a>, schema: &Schema) -> Option<Checked<'a>> {
    let known = |allowed: &[String], text: &str| allowed.iter().any(|known| known == text);
    Some(match (kind, value) {
        (Kind::Text | Kind::Content, Value::Str(text)) => Checked::Str(text),
        (Kind::Id, Value::Str(text)) if !text.contains('\0') => Checked::Str(text),
        (Kind::Name, Value::Str(text)) if participant_name(&text) => Checked::Str(text),
        (Kind::Role, Value::Str(text)) if known(&schema.system_roles, &text) => Checked::Str(text),
        (Kind::Detail, Value::Str(text)) if known(&schema.image_details, &text) => {
            Checked::Str(text)
        }
        (Kind::Version | Kind::Count | Kind::Int, number @ Value::Int(0..)) => {
            Checked::Json(number)
        }
        (Kind::Int, number @ Value::Int(_)) => Checked::Json(number),
        (Kind::Count, Value::BigInt(literal)) if !literal.starts_with('-') => {
            Checked::Json(Value::BigInt(literal))
        }
        (Kind::Int, number @ Value::BigInt(_)) => Checked::Json(number),
        (Kind::Bool, Value::Bool(flag)) => Checked::Bool(flag),
        (Kind::Object, object @ Value::Object(_)) => Checked::Json(object),
        (Kind::Content, Value::Array(items)) => Checked::Records(
            items
                .into_iter()
                .map(|item| tagged(item, &schema.parts, schema))
                .collect::<Option<_>>()?,
        ),
        (Kind::Calls, Value::Array(items)) => Checked::Records(
            items
                .into_iter()
                .map(|item| untagged(item, &schema.call, schema))
                .collect::<Option<_>>()?,
        ),
        (Kind::Usage, value) => Checked::Record(untagged(value, &schema.usage, schema)?),
        (Kind::Data, Value::Str(encoded)) => {
            let bytes = base64(encoded.as_bytes())?;
            if bytes.len() > schema.max_inline_bytes {
                return None;
            }
            Checked::Bytes(bytes)
        }
        _ => return None,
    })
}

/// A participant name. Only names of printable ASCII are vouched for here (the classes' rule
/// is a Unicode regex); any other name goes to the checked path.
fn participant_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| (0x21..0x7f).contains(&b) && !b"<|\\/>".contains(&b))
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

    /// A schema of the shape `stores/_schema.py` declares (the binding reads the real one).
    fn schema() -> Schema {
        fn record(tag: Option<&str>, fields: &[(&str, Kind, bool)]) -> RecordType {
            RecordType {
                tag: tag.map(str::to_owned),
                fields: fields
                    .iter()
                    .map(|&(key, kind, required)| Field {
                        key: key.into(),
                        kind,
                        required,
                        nullable: !required && key != "role",
                    })
                    .collect(),
                needs_one_of: vec![],
            }
        }
        let common = [
            ("message_id", Kind::Id, true),
            ("metadata", Kind::Object, true),
            ("version", Kind::Version, true),
            ("turn_id", Kind::Id, false),
        ];
        let message =
            |tag, own: &[(&str, Kind, bool)]| record(Some(tag), &[&common[..], own].concat());
        let media = |tag| RecordType {
            needs_one_of: vec![0, 4],
            ..record(
                Some(tag),
                &[
                    ("uri", Kind::Text, false),
                    ("mime_type", Kind::Text, false),
                    ("name", Kind::Text, false),
                    ("size_bytes", Kind::Int, false),
                    ("data", Kind::Data, false),
                    ("detail", Kind::Detail, false),
                ][..if tag == "image" { 6 } else { 5 }],
            )
        };
        Schema {
            messages: vec![
                message(
                    "system",
                    &[
                        ("text", Kind::Text, true),
                        ("role", Kind::Role, false),
                        ("name", Kind::Name, false),
                    ],
                ),
                message(
                    "user",
                    &[
                        ("name", Kind::Name, false),
                        ("content", Kind::Content, true),
                    ],
                ),
                message(
                    "ai",
                    &[
                        ("text", Kind::Text, false),
                        ("tool_calls", Kind::Calls, true),
                        ("usage", Kind::Usage, false),
                    ],
                ),
                message(
                    "tool",
                    &[
                        ("text", Kind::Text, true),
                        ("tool_call_id", Kind::Id, true),
                        ("tool_name", Kind::Id, false),
                        ("is_error", Kind::Bool, true),
                    ],
                ),
            ],
            parts: vec![
                record(Some("text"), &[("text", Kind::Text, true)]),
                media("image"),
                media("audio"),
                media("file"),
            ],
            call: record(
                None,
                &[
                    ("id", Kind::Id, true),
                    ("name", Kind::Id, true),
                    ("arguments", Kind::Text, true),
                ],
            ),
            usage: record(
                None,
                &[
                    ("prompt_tokens", Kind::Count, true),
                    ("completion_tokens", Kind::Count, true),
                    ("total_tokens", Kind::Count, true),
                ],
            ),
            max_inline_bytes: 8,
            system_roles: vec!["system".into(), "developer".into()],
            image_details: vec!["auto".into(), "low".into()],
        }
    }

    fn record(json: &str) -> Option<Record<'_>> {
        message(parse(json.as_bytes())?, &schema())
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
        assert_eq!(checked.index, 3);
        assert_eq!(checked.values[2], Checked::Json(Value::Int(3)));
        assert_eq!(checked.values[7], Checked::Bool(false));
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
