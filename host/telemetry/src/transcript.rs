//! The parts of a transcript line the extractor reads (reference §4.2), borrowed from the
//! line's bytes where possible. Everything else — tool outputs, text of assistant turns,
//! progress payloads — is skipped by the parser without being copied.
//!
//! Fields are lenient where agents disagree (token counts that are not integers, `is_error`
//! written as a string) and strict where a wrong type means the line is not a transcript line.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// One line (a "turn").
#[derive(Debug, Default, Deserialize)]
pub struct Turn<'a> {
    /// `user`, `assistant`, `system`, `summary`, `tool_use_result`, …
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    /// The turn's id.
    #[serde(borrow, default)]
    pub uuid: Option<Cow<'a, str>>,
    /// Its parent's id.
    #[serde(rename = "parentUuid", borrow, default)]
    pub parent_uuid: Option<Cow<'a, str>>,
    /// The agent's session id.
    #[serde(rename = "sessionId", borrow, default)]
    pub session_id: Option<Cow<'a, str>>,
    /// Working directory.
    #[serde(borrow, default)]
    pub cwd: Option<Cow<'a, str>>,
    /// ISO 8601 time.
    #[serde(borrow, default)]
    pub timestamp: Option<Cow<'a, str>>,
    /// The message.
    #[serde(borrow, default)]
    pub message: Option<Message<'a>>,
    /// Legacy `tool_use_result` turns: the tool call they answer.
    #[serde(borrow, default, alias = "toolUseId")]
    pub tool_use_id: Option<Cow<'a, str>>,
    /// Legacy `tool_use_result` turns: whether it failed.
    #[serde(default)]
    pub is_error: Truthy,
}

/// A turn's message.
#[derive(Debug, Default, Deserialize)]
pub struct Message<'a> {
    /// The assistant's model.
    #[serde(borrow, default)]
    pub model: Option<Cow<'a, str>>,
    /// Token usage of an assistant turn.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// A string, or a list of blocks.
    #[serde(borrow, default)]
    pub content: Content<'a>,
}

/// Token counts; anything but an integer counts as zero.
#[derive(Debug, Default, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: Int,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: Int,
    /// Tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: Int,
    /// Tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: Int,
}

/// A message's content.
#[derive(Debug, Default)]
pub enum Content<'a> {
    /// Absent or of another type.
    #[default]
    None,
    /// Plain text.
    Text(Cow<'a, str>),
    /// Content blocks.
    Blocks(Vec<Block<'a>>),
}

/// One content block.
#[derive(Debug, Default, Deserialize)]
pub struct Block<'a> {
    /// `text`, `tool_use`, `tool_result`, `thinking`, …
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Cow<'a, str>>,
    /// A `text` block's text.
    #[serde(borrow, default)]
    pub text: Option<Cow<'a, str>>,
    /// A `tool_use` block's call id.
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    /// A `tool_use` block's tool.
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// A `tool_use` block's input, parsed only for the tools whose input names something.
    #[serde(borrow, default)]
    pub input: Option<RawJson<'a>>,
    /// A `tool_result` block's call id.
    #[serde(borrow, default)]
    pub tool_use_id: Option<Cow<'a, str>>,
    /// A `tool_result` block's error flag.
    #[serde(default)]
    pub is_error: Truthy,
}

/// A value's JSON text, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(pub &'a str);

impl<'de: 'a, 'a> Deserialize<'de> for RawJson<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(|raw| RawJson(raw.get()))
    }
}

/// The input fields that name a skill or an agent.
#[derive(Debug, Default, Deserialize)]
pub struct NamingInput<'a> {
    /// `Skill` input.
    #[serde(borrow, default)]
    pub skill: Option<Cow<'a, str>>,
    /// `Skill` input (older spelling).
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// `Task`/`Agent` input.
    #[serde(borrow, default)]
    pub subagent_type: Option<Cow<'a, str>>,
}

/// An integer, or 0 for any other JSON value.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Int(pub i64);

/// JSON truthiness (true, a non-zero number, a non-empty string/array/object).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Truthy(pub bool);

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Int;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Int, E> {
                Ok(Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Int, E> {
                Ok(Int(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Int, E> {
                Ok(Int(0))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Int, E> {
                Ok(Int(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<Int, E> {
                Ok(Int(0))
            }
            fn visit_unit<E>(self) -> Result<Int, E> {
                Ok(Int(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Int, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Int(0))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Int, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Int(0))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Truthy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Truthy;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Truthy, E> {
                Ok(Truthy(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Truthy, E> {
                Ok(Truthy(v != 0))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Truthy, E> {
                Ok(Truthy(v != 0))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Truthy, E> {
                Ok(Truthy(v != 0.0))
            }
            fn visit_str<E>(self, v: &str) -> Result<Truthy, E> {
                Ok(Truthy(!v.is_empty()))
            }
            fn visit_unit<E>(self) -> Result<Truthy, E> {
                Ok(Truthy(false))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Truthy, A::Error> {
                let mut any = false;
                while a.next_element::<IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Truthy(any))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Truthy, A::Error> {
                let mut any = false;
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(Truthy(any))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of content blocks")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Content<'a>, E> {
                Ok(Content::Text(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Content<'a>, A::Error> {
                let mut blocks = Vec::new();
                // A block of another shape (a bare string, say) is skipped, not fatal.
                while let Some(b) = a.next_element::<MaybeBlock<'a>>()? {
                    if let MaybeBlock::Block(b) = b {
                        blocks.push(b);
                    }
                }
                Ok(Content::Blocks(blocks))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Content<'a>, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Content::None)
            }
            fn visit_unit<E>(self) -> Result<Content<'a>, E> {
                Ok(Content::None)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Content<'a>, E> {
                Ok(Content::None)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Content<'a>, E> {
                Ok(Content::None)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Content<'a>, E> {
                Ok(Content::None)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Content<'a>, E> {
                Ok(Content::None)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A list element that may or may not be a block object.
enum MaybeBlock<'a> {
    Block(Block<'a>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for MaybeBlock<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = MaybeBlock<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a content block")
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<MaybeBlock<'a>, A::Error> {
                Block::deserialize(de::value::MapAccessDeserializer::new(a)).map(MaybeBlock::Block)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<MaybeBlock<'a>, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeBlock::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<MaybeBlock<'a>, E> {
                Ok(MaybeBlock::Other)
            }
            fn visit_unit<E>(self) -> Result<MaybeBlock<'a>, E> {
                Ok(MaybeBlock::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<MaybeBlock<'a>, E> {
                Ok(MaybeBlock::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<MaybeBlock<'a>, E> {
                Ok(MaybeBlock::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<MaybeBlock<'a>, E> {
                Ok(MaybeBlock::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<MaybeBlock<'a>, E> {
                Ok(MaybeBlock::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}
