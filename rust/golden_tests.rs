//! The golden window cases of `tests/data/window_cases.jsonl`, shared with pytest.

use crate::model::{Item, Kind, MessageInfo, VecSource};
use crate::tokens::count_text;
use crate::window::{leading_system, select, WindowOptions};
use serde_json::Value;
use std::sync::Arc;

use crate::tokens::MESSAGE_OVERHEAD as OVERHEAD;

fn text_of(spec: &Value) -> String {
    match spec.get("text") {
        Some(Value::String(text)) => text.clone(),
        _ => format!("text of {}", spec["id"].as_str().unwrap_or_default()),
    }
}

fn message(spec: &Value) -> (MessageInfo, u64) {
    let kind = match spec["t"].as_str().unwrap_or_default() {
        "system" => Kind::System,
        "user" => Kind::User,
        "ai" => Kind::Ai,
        "tool" => Kind::Tool,
        "action" => Kind::Action,
        _ => Kind::Form,
    };
    let mut info = MessageInfo::new(kind, spec["id"].as_str().unwrap_or_default());
    info.turn_id = spec.get("turn").and_then(Value::as_str).map(str::to_owned);
    let tokens = match kind {
        Kind::Ai => {
            let text = spec.get("text").and_then(Value::as_str).unwrap_or("");
            let mut tokens = OVERHEAD + count_text(text);
            for call in spec
                .get("calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let id = call[0].as_str().unwrap_or_default();
                let name = call[1].as_str().unwrap_or_default();
                info.call_ids.push(id.to_owned());
                tokens += 3 + count_text(name) + count_text("{}");
            }
            info.final_text = !text.is_empty() && info.call_ids.is_empty();
            tokens
        }
        Kind::Tool => {
            info.tool_call_id = spec["call"].as_str().unwrap_or_default().to_owned();
            OVERHEAD + count_text(&text_of(spec))
        }
        Kind::Action | Kind::Form => 0,
        _ => OVERHEAD + count_text(&text_of(spec)),
    };
    (info, tokens)
}

#[test]
fn golden_window_cases() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/window_cases.jsonl");
    let data = std::fs::read_to_string(path).expect("golden cases are readable");
    let mut cases = 0;
    for line in data.lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).expect("a case is JSON");
        let name = case["name"].as_str().unwrap_or_default();
        let options = &case["options"];
        let (infos, token_counts): (Vec<_>, Vec<_>) = case["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(message)
            .unzip();
        let system_text = options.get("system").and_then(Value::as_str);
        let statuses = options
            .get("turn_statuses")
            .and_then(Value::as_object)
            .map(|map| {
                map.iter()
                    .map(|(k, v)| (k.clone(), v == "completed"))
                    .collect()
            })
            .unwrap_or_default();
        let mut source = VecSource {
            messages: infos.into_iter().map(Arc::new).collect(),
            token_counts,
            statuses,
            system_tokens: 0,
        };
        let mut ids: Vec<String> = Vec::new();
        match system_text {
            Some(text) => {
                source.system_tokens = u128::from(OVERHEAD + count_text(text));
                ids.push("system".into());
            }
            None => {
                if let Some(index) = leading_system(&mut source).expect("leading system") {
                    source.system_tokens = u128::from(source.token_counts[index]);
                    ids.push(source.messages[index].message_id.clone());
                }
            }
        }
        let get =
            |key: &str, default: u64| options.get(key).and_then(Value::as_u64).unwrap_or(default);
        let window_options = WindowOptions {
            max_attached_turns: get("max_attached_turns", 10) as usize,
            max_attached_messages: get("max_attached_messages", 100) as usize,
            compact_completed_tool_turns: options
                .get("compact_completed_tool_turns")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            compression_keep_recent_turns: get("compression_keep_recent_turns", 2) as usize,
            max_attached_tokens: options
                .get("max_attached_tokens")
                .and_then(Value::as_u64)
                .map(u128::from),
            has_current_turn: options.get("current_turn").and_then(Value::as_str) != Some("none"),
            has_system: !ids.is_empty(),
        };
        // The reference's synthetic result counts 4 + count_text("tool result missing").
        let window = select(&mut source, &window_options).expect(name);
        for item in &window.items {
            ids.push(match item {
                Item::Original(index) => source.messages[*index].message_id.clone(),
                Item::MissingResult { caller, call } => {
                    format!("{}:missing", source.messages[*caller].call_ids[*call])
                }
            });
        }
        let expected = &case["expected"];
        let expected_ids: Vec<String> = expected["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(ids, expected_ids, "{name}: ids");
        assert_eq!(
            window.cut_by.map(|c| c.name().to_owned()),
            expected["cut_by"].as_str().map(str::to_owned),
            "{name}: cut_by"
        );
        assert_eq!(
            window.attached_turns as u64,
            expected["attached_turns"].as_u64().unwrap_or(99),
            "{name}"
        );
        assert_eq!(
            window.compacted_turns as u64,
            expected["compacted_turns"].as_u64().unwrap_or(99),
            "{name}"
        );
        let repairs: Vec<Vec<String>> = window
            .repairs
            .iter()
            .map(|v| {
                vec![
                    v.kind.name().to_owned(),
                    v.message_id.clone(),
                    v.tool_call_id.clone(),
                ]
            })
            .collect();
        let expected_repairs: Vec<Vec<String>> =
            serde_json::from_value(expected["repairs"].clone()).expect("repairs");
        assert_eq!(repairs, expected_repairs, "{name}: repairs");
        cases += 1;
    }
    assert!(cases >= 20, "only {cases} golden cases");
}
