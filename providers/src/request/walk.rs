//! The conversation walk every native (non-OpenAI) protocol shares: system and
//! developer messages set apart, the others turned into blocks in message order, and a
//! message's blocks merged into the previous turn when it is from the same side (the
//! natives want alternating turns; parallel tool results share one user turn). What is
//! checked is checked here, in message order, so every protocol refuses the same
//! request at the same field; a [`Dialect`] only says how each block is written.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::{ChatRequest, Content, ContentPart, ImageUrl, Message, Role, ToolCall, TranslateError};

/// How one native protocol writes the blocks of a conversation.
pub(crate) trait Dialect<'a> {
    /// Whether a message that gives no block is dropped (Anthropic and Gemini refuse
    /// empty content) or kept as an empty turn (Converse).
    const DROPS_EMPTY_TURNS: bool;

    /// A block as the protocol writes it: a `Value`, or a type of its own that
    /// serialises straight to the request's bytes (Anthropic's, on every translated
    /// request's path).
    type Block;

    /// A text block (also each system message's block), borrowed from the request
    /// unless it joins several parts.
    fn text(&self, text: Cow<'a, str>) -> Self::Block;

    /// The image part `messages[i].content[j]` of a user message.
    fn image(&self, i: usize, j: usize, image: &'a ImageUrl) -> Result<Self::Block, TranslateError>;

    /// An assistant's tool call, its arguments parsed (`{}` when empty).
    fn tool_call(&mut self, call: &'a ToolCall, args: Value) -> Self::Block;

    /// The tool message `messages[i]`: the result of an earlier call (see
    /// [`Message::answered_call_id`] and [`Message::tool_result_text`]).
    fn tool_result(&mut self, i: usize, m: &'a Message) -> Result<Self::Block, TranslateError>;
}

/// A request's conversation in native blocks.
#[derive(Debug)]
pub(crate) struct Conversation<B> {
    /// One text block per system or developer message.
    pub system: Vec<B>,
    pub turns: Vec<Turn<B>>,
}

/// Consecutive blocks from one side.
#[derive(Debug)]
pub(crate) struct Turn<B> {
    /// The model's turn (an assistant message), else the user's (user and tool messages).
    pub from_model: bool,
    pub blocks: Vec<B>,
}

impl<B> Conversation<B> {
    fn push<'a, D: Dialect<'a, Block = B>>(&mut self, from_model: bool, blocks: Vec<B>) {
        if D::DROPS_EMPTY_TURNS && blocks.is_empty() {
            return;
        }
        match self.turns.last_mut() {
            Some(last) if last.from_model == from_model => last.blocks.extend(blocks),
            _ => self.turns.push(Turn { from_model, blocks }),
        }
    }
}

/// `turns` as `{"role": …, <key>: [blocks]}` objects, with the protocol's role names
/// and the key that holds the blocks.
pub(crate) fn messages(turns: Vec<Turn<Value>>, user: &str, model: &str, key: &str) -> Vec<Value> {
    turns
        .into_iter()
        .map(|t| {
            let role = if t.from_model { model } else { user };
            let mut m = Map::new();
            m.insert("role".to_owned(), Value::from(role));
            m.insert(key.to_owned(), Value::Array(t.blocks));
            Value::Object(m)
        })
        .collect()
}

/// Walks `req.messages` in order and writes them in `dialect`.
pub(crate) fn walk<'a, D: Dialect<'a>>(
    req: &'a ChatRequest,
    dialect: &mut D,
) -> Result<Conversation<D::Block>, TranslateError> {
    let mut conv = Conversation { system: Vec::new(), turns: Vec::new() };
    for (i, m) in req.messages.iter().enumerate() {
        match m.role {
            Role::System | Role::Developer => {
                let text = m.text(i, "a system message must be text")?;
                conv.system.push(dialect.text(text));
            }
            Role::User => {
                let blocks = user_blocks(dialect, i, m)?;
                conv.push::<D>(false, blocks);
            }
            Role::Assistant => {
                let blocks = assistant_blocks(dialect, i, m)?;
                conv.push::<D>(true, blocks);
            }
            Role::Tool => {
                let block = dialect.tool_result(i, m)?;
                conv.push::<D>(false, vec![block]);
            }
        }
    }
    Ok(conv)
}

fn user_blocks<'a, D: Dialect<'a>>(dialect: &D, i: usize, m: &'a Message) -> Result<Vec<D::Block>, TranslateError> {
    match &m.content {
        None => Ok(Vec::new()),
        Some(Content::Text(t)) => Ok(vec![dialect.text(Cow::Borrowed(t))]),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| match p {
                ContentPart::Text { text } => Ok(dialect.text(Cow::Borrowed(text))),
                ContentPart::ImageUrl { image_url } => dialect.image(i, j, image_url),
                ContentPart::Other => Err(TranslateError::unsupported(
                    format!("messages[{i}].content[{j}]"),
                    "only text and image parts are supported by this upstream",
                )),
            })
            .collect(),
    }
}

/// The text (none when empty: the natives refuse blank text blocks), then the calls.
fn assistant_blocks<'a, D: Dialect<'a>>(
    dialect: &mut D,
    i: usize,
    m: &'a Message,
) -> Result<Vec<D::Block>, TranslateError> {
    let mut blocks = Vec::new();
    if m.content.is_some() {
        let text = m.text(i, "an assistant message must be text")?;
        if !text.is_empty() {
            blocks.push(dialect.text(text));
        }
    }
    for (j, call) in m.tool_calls.iter().flatten().enumerate() {
        let args = call.function.arguments_value().map_err(|e| {
            TranslateError::invalid(format!("messages[{i}].tool_calls[{j}].function.arguments"), e.to_string())
        })?;
        blocks.push(dialect.tool_call(call, args));
    }
    Ok(blocks)
}

impl Message {
    /// The text of `messages[i]`, which must have content and only text (`why` says so
    /// otherwise).
    fn text(&self, i: usize, why: &str) -> Result<Cow<'_, str>, TranslateError> {
        self.content
            .as_ref()
            .and_then(Content::text_only)
            .ok_or_else(|| TranslateError::unsupported(format!("messages[{i}].content"), why))
    }

    /// The call id tool message `messages[i]` answers; required.
    pub(crate) fn answered_call_id(&self, i: usize) -> Result<&str, TranslateError> {
        self.tool_call_id
            .as_deref()
            .ok_or_else(|| TranslateError::invalid(format!("messages[{i}].tool_call_id"), "a tool message needs one"))
    }

    /// The result text of tool message `messages[i]`: text only, `""` when absent.
    pub(crate) fn tool_result_text(&self, i: usize) -> Result<Cow<'_, str>, TranslateError> {
        if self.content.is_none() {
            return Ok(Cow::Borrowed(""));
        }
        self.text(i, "a tool result must be text")
    }
}
