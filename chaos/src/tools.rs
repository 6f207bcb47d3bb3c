//! Tool calls, the same in every protocol: whether an answer calls the
//! scripted tool, and the call's arguments cut into content pieces.
//!
//! An agent loop is: a request declares tools → the model calls one → the
//! agent runs it → the next request carries the tool's result → the model
//! answers in text. So a request whose last turn carries a tool result is
//! answered in text even when it declares the scripted tool; otherwise the
//! loop would never end.

use std::ops::Range;

use serde_json::Value;

use super::plan::Plan;

/// The tool an answer calls: the script's `tool_call` when the request
/// declares a tool of that very name (case-sensitive), unless its last turn
/// carries a tool result (`answers_tool`).
pub(crate) fn called(plan: &Plan, declared: &[String], answers_tool: bool) -> Option<String> {
    let name = plan.tool_call.as_ref()?;
    (!answers_tool && declared.iter().any(|t| t == name)).then(|| name.clone())
}

/// A call's arguments for an answer that sends content chunks `sent` of the
/// script's `total`: the script's `tool_arguments` split evenly across the
/// `total` chunks (the pieces of `sent` kept), or `{"query": "<words>"}`
/// around `words` (one per sent chunk). `whole` (Gemini, which sends a call
/// in one piece) gives the scripted arguments whole, or the query as one
/// piece. No piece when no chunk is sent.
pub(crate) fn arguments(
    scripted: Option<&str>,
    sent: Range<u32>,
    total: u32,
    words: Vec<String>,
    whole: bool,
) -> Vec<String> {
    if sent.is_empty() {
        return Vec::new();
    }
    match (scripted, whole) {
        (Some(args), true) => vec![args.to_owned()],
        (Some(args), false) => {
            let at = |i: u32| usize::try_from(i).unwrap_or(usize::MAX);
            let mut pieces = split(args, total);
            pieces.truncate(at(sent.end));
            pieces.drain(..at(sent.start).min(pieces.len()));
            pieces
        }
        (None, true) => vec![serde_json::json!({ "query": words.concat() }).to_string()],
        (None, false) => {
            let mut pieces: Vec<String> = words.iter().map(|w| json_fragment(w)).collect();
            if let Some(first) = pieces.first_mut() {
                first.insert_str(0, "{\"query\": \"");
            }
            if let Some(last) = pieces.last_mut() {
                last.push_str("\"}");
            }
            pieces
        }
    }
}

/// `text` in `n` pieces of nearly equal length in characters (some empty
/// when it has fewer than `n`); they join into `text` again.
fn split(text: &str, n: u32) -> Vec<String> {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n == 0 {
        return Vec::new();
    }
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    let chars = bounds.len() - 1;
    // Piece k holds characters k·chars/n up to (k+1)·chars/n.
    let cut = |k: usize| bounds[(k.saturating_mul(chars) / n).min(chars)];
    (0..n).map(|k| text[cut(k)..cut(k + 1)].to_owned()).collect()
}

/// `s` escaped for the inside of a JSON string.
fn json_fragment(s: &str) -> String {
    let quoted = Value::from(s).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Script;

    fn words(n: u32) -> Vec<String> {
        (0..n).map(|i| crate::wire::word(i).to_owned()).collect()
    }

    #[test]
    fn a_tool_result_ends_the_tool_loop() {
        let plan = Plan::new(&Script { tool_call: Some("Bash".to_owned()), ..Script::default() });
        let declared = ["Read".to_owned(), "Bash".to_owned()];
        assert_eq!(called(&plan, &declared, false).as_deref(), Some("Bash"));
        assert_eq!(called(&plan, &declared, true), None, "a tool result is answered in text");
        assert_eq!(called(&plan, &["bash".to_owned()], false), None, "names match case-sensitively");
        assert_eq!(called(&Plan::new(&Script::default()), &declared, false), None);
    }

    #[test]
    fn scripted_arguments_are_split_across_the_chunks() {
        let args = r#"{"command":"ls -l","é":1}"#;
        let pieces = arguments(Some(args), 0..4, 4, words(4), false);
        assert_eq!(pieces.len(), 4);
        assert_eq!(pieces.concat(), args);
        let lens: Vec<usize> = pieces.iter().map(|p| p.chars().count()).collect();
        assert!(lens.iter().all(|l| (6..=7).contains(l)), "{lens:?}");
        // Cut at max_tokens: the first pieces of the whole split.
        assert_eq!(arguments(Some(args), 0..2, 4, words(2), false), pieces[..2]);
        // Shorter than the chunks: empty pieces keep one per chunk.
        assert_eq!(arguments(Some("{}"), 0..3, 3, words(3), false), ["", "{", "}"]);
        assert_eq!(arguments(Some(args), 0..4, 4, words(4), true), [args]);
        assert!(arguments(Some(args), 0..0, 0, Vec::new(), false).is_empty());
    }

    #[test]
    fn default_arguments_are_a_query_of_the_words() {
        let pieces = arguments(None, 0..2, 2, words(2), false);
        assert_eq!(pieces, [r#"{"query": "The "#, r#"upstream "}"#]);
        assert_eq!(arguments(None, 0..2, 2, words(2), true), [r#"{"query":"The upstream "}"#]);
        assert!(arguments(None, 0..0, 5, Vec::new(), false).is_empty());
    }
}
