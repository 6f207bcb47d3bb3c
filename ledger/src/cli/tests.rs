use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    admin: AdminArgs,
}

fn parse(args: &[&str]) -> Result<AdminArgs, clap::Error> {
    let mut argv = vec!["admin"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).map(|c| c.admin)
}

async fn run(ledger: &Ledger, args: &[&str]) -> Result<String, LedgerError> {
    let cmd = parse(args).map_err(|e| panic!("{e}")).unwrap().command;
    let mut out = Vec::new();
    run_admin(ledger, cmd, &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn parses_the_documented_command_lines() {
    let a = parse(&["--ledger", "sqlite://x.db", "account", "create", "team-a", "--balance", "15.00"]).unwrap();
    assert_eq!(a.ledger, "sqlite://x.db");
    assert_eq!(
        a.command,
        AdminCommand::Account(AccountCommand::Create { name: "team-a".into(), balance: 15_000_000_000 })
    );
    let a = parse(&["key", "create", "team-a", "--json"]).unwrap();
    assert_eq!(a.command, AdminCommand::Key(KeyCommand::Create { account: "team-a".into(), json: true }));
    let err = parse(&["account", "topup", "team-a", "--amount", "-3"]).unwrap_err();
    assert!(err.to_string().contains("amounts must not be negative"), "{err}");
}

#[tokio::test]
async fn account_and_key_commands_print_the_contract() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let out = run(&ledger, &["account", "create", "team-a", "--balance", "15.00"]).await.unwrap();
    assert_eq!(out, "created account team-a with balance 15.00 USD\n");
    let out = run(&ledger, &["account", "topup", "team-a", "--amount", "0.5"]).await.unwrap();
    assert_eq!(out, "topped up account team-a by 0.50 USD; balance 15.50 USD\n");

    let out = run(&ledger, &["account", "show", "team-a", "--json"]).await.unwrap();
    assert_eq!(
        out,
        "{\"account\":\"team-a\",\"balance_nanodollars\":15500000000,\
         \"reserved_nanodollars\":0,\"balance_usd\":\"15.50\",\"granted_nanodollars\":0,\"grants_open\":0}\n"
    );
    let out = run(&ledger, &["account", "show", "team-a"]).await.unwrap();
    assert_eq!(out, "ACCOUNT    team-a\nBALANCE    15.50 USD\nRESERVED   0.00 USD\nAVAILABLE  15.50 USD\n");

    let out = run(&ledger, &["key", "create", "team-a"]).await.unwrap();
    let key = out.strip_suffix('\n').unwrap();
    assert!(key.starts_with("sk-sluice-") && !key.contains(char::is_whitespace));
    let who = ledger.authenticate(key).await.unwrap().unwrap();
    assert_eq!(who.name, "team-a");

    let out = run(&ledger, &["key", "create", "team-a", "--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["account"], "team-a");
    assert!(v["key"].as_str().unwrap().starts_with("sk-sluice-"));
    assert_eq!(v.as_object().unwrap().len(), 2);
}

#[tokio::test]
async fn errors_name_the_account() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let err = run(&ledger, &["account", "show", "nobody"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
    let err = run(&ledger, &["key", "create", "nobody"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
    run(&ledger, &["account", "create", "a", "--balance", "1"]).await.unwrap();
    let err = run(&ledger, &["account", "create", "a", "--balance", "1"]).await.unwrap_err();
    assert_eq!(err.to_string(), "account \"a\" already exists");
    let err = run(&ledger, &["key", "list", "nobody"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
}

#[tokio::test]
async fn unknown_keys_are_named_without_printing_them() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let err = run(&ledger, &["key", "revoke", "42"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key with id 42 in this ledger");
    let err = run(&ledger, &["key", "revoke", "sk-sluice-AbCdEfGhIjKl"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key sk-sluice-AbCd… in this ledger");
    let err = run(&ledger, &["key", "revoke", "team-a"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key \"team-a\" in this ledger");
}

#[test]
fn parses_key_list_and_revoke() {
    let a = parse(&["key", "list", "team-a", "--json"]).unwrap();
    assert_eq!(a.command, AdminCommand::Key(KeyCommand::List { account: "team-a".into(), json: true }));
    let a = parse(&["key", "revoke", "12"]).unwrap();
    assert_eq!(a.command, AdminCommand::Key(KeyCommand::Revoke { key: "12".into() }));
    assert_eq!(parse_key_selector("12"), KeySelector::Id(12));
    assert_eq!(parse_key_selector("sk-sluice-12"), KeySelector::Key("sk-sluice-12"));
    assert_eq!(parse_key_selector("team-a"), KeySelector::Key("team-a"));
}

#[test]
fn times_print_as_utc_rfc3339() {
    let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    assert_eq!(format_utc(at(0)), "1970-01-01T00:00:00Z");
    assert_eq!(format_utc(at(951_782_400)), "2000-02-29T00:00:00Z");
    assert_eq!(format_utc(at(1_796_121_884)), "2026-12-01T10:44:44Z");
    assert_eq!(format_utc(at(4_102_444_799)), "2099-12-31T23:59:59Z");
}

#[test]
fn the_key_table_aligns_its_columns() {
    let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    let key = |id, revoked| KeyInfo {
        id,
        account: "team-a".into(),
        prefix: format!("sk-sluice-k{id:03}"),
        created_at: at(1_796_121_884),
        revoked_at: revoked,
    };
    let mut out = Vec::new();
    write_key_table(&mut out, &[key(7, None), key(12, Some(at(1_796_125_484)))]).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "ID  PREFIX          CREATED               REVOKED\n\
         7   sk-sluice-k007  2026-12-01T10:44:44Z  -\n\
         12  sk-sluice-k012  2026-12-01T10:44:44Z  2026-12-01T11:44:44Z\n"
    );
    let mut out = Vec::new();
    write_key_table(&mut out, &[]).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "ID  PREFIX  CREATED  REVOKED\n");
}

#[tokio::test]
async fn keys_are_listed_and_revoked_by_key_or_id() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    run(&ledger, &["account", "create", "team-a", "--balance", "1"]).await.unwrap();
    run(&ledger, &["account", "create", "team-b", "--balance", "1"]).await.unwrap();
    let first = run(&ledger, &["key", "create", "team-a"]).await.unwrap();
    let first = first.trim_end();
    let second = run(&ledger, &["key", "create", "team-a"]).await.unwrap();
    let second = second.trim_end();
    let other = run(&ledger, &["key", "create", "team-b"]).await.unwrap();

    let keys = ledger.keys("team-a").await.unwrap();
    assert_eq!(keys.len(), 2);
    let (k1, k2) = (&keys[0], &keys[1]);
    assert_eq!((k1.id, k2.id), (1, 2));
    assert_eq!(k1.prefix, first[..14]);
    assert_eq!(k2.prefix, second[..14]);
    let created = |k: &KeyInfo| format_utc(k.created_at);
    let out = run(&ledger, &["key", "list", "team-a"]).await.unwrap();
    assert_eq!(
        out,
        format!(
            "ID  PREFIX          CREATED               REVOKED\n\
             1   {}  {}  -\n\
             2   {}  {}  -\n",
            k1.prefix,
            created(k1),
            k2.prefix,
            created(k2)
        )
    );

    // By the whole key, then by id; a second time is a no-op that says so.
    let out = run(&ledger, &["key", "revoke", first]).await.unwrap();
    assert_eq!(out, format!("revoked key 1 ({}…) of account team-a\n", k1.prefix));
    assert_eq!(ledger.authenticate(first).await.unwrap(), None);
    assert!(ledger.authenticate(second).await.unwrap().is_some());
    let revoked_at = ledger.keys("team-a").await.unwrap()[0].revoked_at.unwrap();
    let out = run(&ledger, &["key", "revoke", "1"]).await.unwrap();
    assert_eq!(
        out,
        format!(
            "key 1 ({}…) of account team-a was already revoked at {}; nothing changed\n",
            k1.prefix,
            format_utc(revoked_at)
        )
    );
    let out = run(&ledger, &["key", "revoke", "2"]).await.unwrap();
    assert_eq!(out, format!("revoked key 2 ({}…) of account team-a\n", k2.prefix));
    assert_eq!(ledger.authenticate(second).await.unwrap(), None);
    assert!(ledger.authenticate(other.trim_end()).await.unwrap().is_some());

    let out = run(&ledger, &["key", "list", "team-a", "--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let now = ledger.keys("team-a").await.unwrap();
    assert_eq!(
        v,
        serde_json::json!([
            {"id": 1, "account": "team-a", "prefix": k1.prefix, "created": created(k1),
             "revoked": format_utc(now[0].revoked_at.unwrap())},
            {"id": 2, "account": "team-a", "prefix": k2.prefix, "created": created(k2),
             "revoked": format_utc(now[1].revoked_at.unwrap())},
        ])
    );
    assert!(out.ends_with("}]\n") && !out[..out.len() - 1].contains('\n'));
    let out = run(&ledger, &["key", "list", "team-b", "--json"]).await.unwrap();
    assert_eq!(out.matches("\"id\":3").count(), 1, "{out}");
}

#[tokio::test]
async fn the_synthetic_account_shows_its_spend() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    for (at_ms, cost) in [(1_000, 1_500), (2_000, 2_500)] {
        let check = crate::SyntheticCheck {
            route: "ns/chat".into(),
            upstream: "ns/a".into(),
            gateway_id: "gw".into(),
            at: std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms),
            outcome: "ok".into(),
            first_byte_ms: Some(40),
            cost_nanos: cost,
        };
        ledger.record_synthetic(&check).await.unwrap();
    }
    let out = run(&ledger, &["account", "show", "sluice-synthetic"]).await.unwrap();
    assert_eq!(
        out,
        "ACCOUNT    sluice-synthetic\nBALANCE    0.00 USD\nRESERVED   0.00 USD\n\
         AVAILABLE  0.00 USD\nSPENT      0.000004 USD (synthetic checks)\n"
    );
}

#[tokio::test]
async fn account_show_says_what_balance_grants_hold() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let account = ledger.create_account("team-b", 10 * crate::NANOS_PER_USD).await.unwrap();
    let biller = crate::Biller::start(ledger.clone(), crate::BillerConfig::new("gw-1"), None);
    let hold = biller.reserve(account.id, crate::NANOS_PER_USD / 2, "r1").await.unwrap();
    let out = run(&ledger, &["account", "show", "team-b"]).await.unwrap();
    let reserved = out.lines().find(|l| l.starts_with("RESERVED")).unwrap();
    assert_eq!(reserved, "RESERVED   0.50 USD (0.50 USD in 1 balance grant of gateways)");
    let out = run(&ledger, &["account", "show", "team-b", "--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["reserved_nanodollars"].as_i64(), v["granted_nanodollars"].as_i64(), v["grants_open"].as_u64()),
        (Some(500_000_000), Some(500_000_000), Some(1))
    );
    hold.release().await.unwrap();
    biller.shutdown(std::time::Duration::from_secs(5)).await;
    let out = run(&ledger, &["account", "show", "team-b"]).await.unwrap();
    assert!(out.contains("RESERVED   0.00 USD\n"), "{out}");
}

#[tokio::test]
async fn account_audit_adds_the_journal_up() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let account = ledger.create_account("team-c", 10 * crate::NANOS_PER_USD).await.unwrap();
    let biller = crate::Biller::start(ledger.clone(), crate::BillerConfig::new("gw-1"), None);
    let hold = biller.reserve(account.id, crate::NANOS_PER_USD, "r1").await.unwrap();
    hold.settle(crate::NANOS_PER_USD / 4, crate::Usage { input_tokens: 1, output_tokens: 2, upstream: None })
        .await
        .unwrap();
    let out = run(&ledger, &["account", "audit", "team-c"]).await.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "ACCOUNT      team-c");
    assert!(lines[2].starts_with("BALANCE      9.75 USD") && lines[2].ends_with("journal 9.75 USD ok"), "{out}");
    assert!(out.contains("0.00 USD in reservations + 0.75 USD in balance grants ok"), "{out}");
    assert_eq!(lines.last(), Some(&"RESULT       consistent"), "{out}");
    let out = run(&ledger, &["account", "audit", "team-c", "--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["consistent"].as_bool(), v["balance_nanos"].as_i64()), (Some(true), Some(9_750_000_000)));
    biller.shutdown(std::time::Duration::from_secs(5)).await;
    let err = run(&ledger, &["account", "audit", "nobody"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
}
