//! How a core reads one message (`_reference/read.py`): the fields the rules need and the
//! heuristic formula of its tokens, read through the message's properties in the reference's
//! order, with its errors. The host (the binding) only says how to get an attribute and what a
//! value is, so a subclass that overrides a property is read the same way by both cores.

use crate::error::{CoreError, Where};
use crate::model::{Kind, MessageInfo};
use crate::tokens::{MEDIA_PART_TOKENS, MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD};

/// The attributes the rules read, in the order of their names in `Attr::NAMES`.
#[derive(Clone, Copy)]
pub enum Attr {
    ModelVisible,
    MessageId,
    TurnId,
    Text,
    ToolCalls,
    ToolCallId,
    Id,
    Name,
    Arguments,
    Content,
    ProviderItems,
    ProviderText,
}

impl Attr {
    pub const NAMES: [&'static str; 12] = [
        "model_visible",
        "message_id",
        "turn_id",
        "text",
        "tool_calls",
        "tool_call_id",
        "id",
        "name",
        "arguments",
        "content",
        "provider_items",
        "provider_text",
    ];

    pub fn name(self) -> &'static str {
        Attr::NAMES[self as usize]
    }
}

/// The library classes a value is checked against (a subclass counts).
#[derive(Clone, Copy)]
pub enum Class {
    ToolCall,
    TextPart,
}

/// A str as the host holds it.
pub enum Str<'a> {
    NotAStr,
    Utf8(&'a str),
    /// A str holding a lone surrogate.
    Surrogates,
}

/// A value of the host language, as the reading rules see it.
pub trait Value: Sized {
    type Error: From<CoreError>;
    /// The value's attribute (a property runs the host's code).
    fn attr(&self, attr: Attr) -> Result<Self, Self::Error>;
    fn is_none(&self) -> bool;
    fn is_true(&self) -> Result<bool, Self::Error>;
    /// The value as a str, by its real class (none of a str subclass's methods runs).
    fn as_str(&self) -> Str<'_>;
    /// Heuristic tokens of a value that is a str.
    fn str_tokens(&self) -> Result<u64, Self::Error>;
    /// Whether the value's class derives from `class`.
    fn is_a(&self, class: Class) -> Result<bool, Self::Error>;
    /// The name of the value's class, as error messages give it.
    fn type_name(&self) -> String;
    /// Visits each item of an iterable, in order.
    fn each(
        &self,
        visit: impl FnMut(usize, Self) -> Result<(), Self::Error>,
    ) -> Result<(), Self::Error>;
}

/// `value` as a str, or `NotAStr` naming `at.field`.
fn text<'v, V: Value>(
    value: &'v V,
    at: Where<'_>,
    field: &'static str,
) -> Result<Str<'v>, CoreError> {
    match value.as_str() {
        Str::NotAStr => Err(CoreError::NotAStr {
            at: at.to_string(),
            field,
            type_name: value.type_name(),
        }),
        found => Ok(found),
    }
}

/// Heuristic tokens of a str field.
fn text_tokens<V: Value>(value: &V, at: Where<'_>, field: &'static str) -> Result<u64, V::Error> {
    text(value, at, field)?;
    value.str_tokens()
}

/// An id: a str of valid Unicode.
fn identifier<V: Value>(
    value: &V,
    at: Where<'_>,
    field: &'static str,
) -> Result<String, CoreError> {
    match text(value, at, field)? {
        Str::Utf8(text) => Ok(text.to_owned()),
        _ => Err(CoreError::LoneSurrogate {
            at: at.to_string(),
            field,
        }),
    }
}

/// Visits each of an AI message's tool calls, checked to be a tool call, with its place.
fn each_call<V: Value>(
    message: &V,
    at: Where<'_>,
    mut visit: impl FnMut(&V, Where<'_>) -> Result<(), V::Error>,
) -> Result<(), V::Error> {
    message.attr(Attr::ToolCalls)?.each(|index, call| {
        let place = Where::Call(&at, index);
        if !call.is_a(Class::ToolCall)? {
            let type_name = call.type_name();
            let at = place.to_string();
            return Err(CoreError::NotAToolCall { at, type_name }.into());
        }
        visit(&call, place)
    })
}

/// What the rules need of a message of `kind`, read from its properties.
pub fn info<V: Value>(message: &V, kind: Kind, at: Where<'_>) -> Result<MessageInfo, V::Error> {
    let visible = message.attr(Attr::ModelVisible)?.is_true()?;
    let message_id = identifier(&message.attr(Attr::MessageId)?, at, "message_id")?;
    let mut info = MessageInfo::new(kind, &message_id);
    info.visible = visible;
    let turn_id = message.attr(Attr::TurnId)?;
    if !turn_id.is_none() {
        info.turn_id = Some(identifier(&turn_id, at, "turn_id")?);
    }
    match kind {
        Kind::Ai => {
            let reply = message.attr(Attr::Text)?;
            let has_text = !reply.is_none()
                && match text(&reply, at, "text")? {
                    Str::Utf8(text) => !text.is_empty(),
                    _ => true,
                };
            each_call(message, at, |call, place| {
                info.call_ids
                    .push(identifier(&call.attr(Attr::Id)?, place, "id")?);
                info.call_names
                    .push(identifier(&call.attr(Attr::Name)?, place, "name")?);
                Ok(())
            })?;
            info.final_text = has_text && info.call_ids.is_empty();
        }
        Kind::Tool => {
            let id = message.attr(Attr::ToolCallId)?;
            info.tool_call_id = identifier(&id, at, "tool_call_id")?;
        }
        _ => {}
    }
    Ok(info)
}

/// The heuristic formula of one message of `kind`, read from its properties (an AI message's
/// provider items last, only when it has any, counted from their JSON text).
pub fn tokens<V: Value>(message: &V, kind: Kind, at: Where<'_>) -> Result<u64, V::Error> {
    let mut total = MESSAGE_OVERHEAD;
    match kind {
        Kind::User => {
            let content = message.attr(Attr::Content)?;
            if let Str::NotAStr = content.as_str() {
                content.each(|index, part| {
                    total += if part.is_a(Class::TextPart)? {
                        let at = Where::Part(&at, index);
                        text_tokens(&part.attr(Attr::Text)?, at, "text")?
                    } else {
                        MEDIA_PART_TOKENS
                    };
                    Ok(())
                })?;
            } else {
                total += content.str_tokens()?;
            }
        }
        Kind::Ai => {
            let reply = message.attr(Attr::Text)?;
            if !reply.is_none() {
                total += text_tokens(&reply, at, "text")?;
            }
            each_call(message, at, |call, place| {
                total += TOOL_CALL_OVERHEAD
                    + text_tokens(&call.attr(Attr::Name)?, place, "name")?
                    + text_tokens(&call.attr(Attr::Arguments)?, place, "arguments")?;
                Ok(())
            })?;
            if message.attr(Attr::ProviderItems)?.is_true()? {
                let items = message.attr(Attr::ProviderText)?;
                total += text_tokens(&items, at, "provider_text")?;
            }
        }
        Kind::Tool | Kind::System => total += text_tokens(&message.attr(Attr::Text)?, at, "text")?,
        Kind::Action | Kind::Form => return Ok(0),
    }
    Ok(total)
}
