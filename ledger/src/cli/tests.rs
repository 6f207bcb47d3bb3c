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
    assert_eq!(
        a.command,
        AdminCommand::Key(KeyCommand::Create { account: "team-a".into(), json: true, limits: LimitArgs::default() })
    );
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
         \"reserved_nanodollars\":0,\"balance_usd\":\"15.50\",\"granted_nanodollars\":0,\"grants_open\":0,\
         \"limits\":{\"rpm\":null,\"tpm\":null,\"tpd\":null,\"concurrency\":null,\
         \"daily_spend_nanos\":null,\"monthly_spend_nanos\":null}}\n"
    );
    let out = run(&ledger, &["account", "show", "team-a"]).await.unwrap();
    assert_eq!(
        out,
        "ACCOUNT    team-a\nBALANCE    15.50 USD\nRESERVED   0.00 USD\nAVAILABLE  15.50 USD\nLIMITS     none\n"
    );

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
         AVAILABLE  0.00 USD\nSPENT      0.000004 USD (synthetic checks)\nLIMITS     none\n"
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
    hold.settle(
        crate::NANOS_PER_USD / 4,
        crate::Usage { input_tokens: 1, output_tokens: 2, web_searches: 0, upstream: None },
    )
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

/// 2026-12-05T00:00:00Z, a minute's and a day's start.
const T0: i64 = 1_796_428_800_000;

fn at_ms(ms: i64) -> SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms as u64)
}

async fn run_at(ledger: &Ledger, args: &[&str], now: SystemTime) -> Result<String, LedgerError> {
    let cmd = parse(args).map_err(|e| panic!("{e}")).unwrap().command;
    let mut out = Vec::new();
    run_admin_at(ledger, cmd, &mut out, now).await?;
    Ok(String::from_utf8(out).unwrap())
}

#[test]
fn parses_limit_flags() {
    let a = parse(&["key", "create", "acme", "--rpm", "600", "--tpm", "60_000", "--daily-spend", "2.50"]).unwrap();
    let limits = LimitArgs {
        rpm: Some(Setting(Some(600))),
        tpm: Some(Setting(Some(60_000))),
        daily_spend: Some(Setting(Some(2_500_000_000))),
        ..LimitArgs::default()
    };
    assert_eq!(a.command, AdminCommand::Key(KeyCommand::Create { account: "acme".into(), json: false, limits }));
    assert_eq!(
        limits.update(),
        LimitsUpdate(vec![
            (Meter::Requests, Some(600)),
            (Meter::Tokens, Some(60_000)),
            (Meter::DailySpend, Some(2_500_000_000))
        ])
    );
    // A key without limit flags changes nothing.
    let a = parse(&["key", "create", "acme"]).unwrap();
    assert_eq!(
        a.command,
        AdminCommand::Key(KeyCommand::Create { account: "acme".into(), json: false, limits: LimitArgs::default() })
    );
    assert!(LimitArgs::default().is_empty());

    let a = parse(&["key", "update", "7", "--concurrency", "off", "--monthly-spend", "none", "--tpd", "1000"]).unwrap();
    let AdminCommand::Key(KeyCommand::Update { key, limits }) = a.command else { panic!("{:?}", a.command) };
    assert_eq!(key, "7");
    assert_eq!(
        limits.update(),
        LimitsUpdate(vec![(Meter::DailyTokens, Some(1000)), (Meter::Concurrency, None), (Meter::MonthlySpend, None)])
    );
    let a = parse(&["account", "update", "acme", "--daily-spend", "0"]).unwrap();
    let AdminCommand::Account(AccountCommand::Update { name, limits }) = a.command else { panic!("{:?}", a.command) };
    assert_eq!((name.as_str(), limits.daily_spend), ("acme", Some(Setting(Some(0)))));
}

#[test]
fn bad_limit_values_are_refused_naming_them() {
    let err = parse(&["key", "update", "7", "--rpm", "0"]).unwrap_err().to_string();
    assert!(err.contains("--rpm") && err.contains("\"0\" is not a positive whole number"), "{err}");
    let err = parse(&["key", "update", "7", "--concurrency", "-5"]).unwrap_err().to_string();
    assert!(err.contains("--concurrency") && err.contains("\"-5\" is not a positive whole number"), "{err}");
    let err = parse(&["key", "create", "acme", "--tpm", "many"]).unwrap_err().to_string();
    assert!(err.contains("--tpm") && err.contains("\"many\" is not a positive whole number"), "{err}");
    let err = parse(&["key", "update", "7", "--daily-spend", "-1"]).unwrap_err().to_string();
    assert!(
        err.contains("--daily-spend") && err.contains("invalid USD amount \"-1\": amounts must not be negative"),
        "{err}"
    );
    let err = parse(&["account", "update", "acme", "--monthly-spend", "$5"]).unwrap_err().to_string();
    assert!(err.contains("--monthly-spend") && err.contains("invalid USD amount \"$5\""), "{err}");
    assert!(err.contains("or `none` to remove the limit"), "{err}");
}

#[test]
fn update_without_a_limit_flag_says_what_to_give() {
    for args in [&["key", "update", "7"][..], &["account", "update", "acme"][..]] {
        let err = parse(args).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument, "{err}");
        let text = err.to_string();
        for flag in ["--rpm", "--tpm", "--tpd", "--concurrency", "--daily-spend", "--monthly-spend"] {
            assert!(text.contains(flag), "{flag} missing from {text}");
        }
    }
}

#[test]
fn help_says_what_each_limit_is() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let help = cmd
        .find_subcommand_mut("key")
        .and_then(|c| c.find_subcommand_mut("update"))
        .map(|c| c.render_long_help().to_string())
        .unwrap();
    for text in [
        "Requests per minute",
        "Input plus output tokens per minute",
        "tokens per day",
        "Requests in flight at once",
        "Spend per UTC calendar day in USD",
        "Spend per UTC calendar month in USD",
        "`none` removes",
    ] {
        assert!(help.contains(text), "{text:?} missing from {help}");
    }
}

#[tokio::test]
async fn key_create_sets_the_limits_given() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    run(&ledger, &["account", "create", "acme", "--balance", "10"]).await.unwrap();
    let out = run(&ledger, &["key", "create", "acme", "--rpm", "600", "--daily-spend", "2.5"]).await.unwrap();
    let key = out.strip_suffix('\n').unwrap();
    assert!(key.starts_with("sk-sluice-") && !key.contains(char::is_whitespace), "{out}");
    let who = ledger.authenticate(key).await.unwrap().unwrap();
    let limits = who.limits.unwrap();
    assert_eq!(limits.key.to_string(), "rpm 600, daily_spend 2.50 USD");
    assert!(limits.account.is_empty());

    let out = run(&ledger, &["key", "create", "acme", "--json", "--concurrency", "4"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 2, "{out}");
    let who = ledger.authenticate(v["key"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(who.limits.unwrap().key.to_string(), "concurrency 4");

    let out = run(&ledger, &["key", "create", "acme"]).await.unwrap();
    assert_eq!(ledger.authenticate(out.trim_end()).await.unwrap().unwrap().limits, None);
    let err = run(&ledger, &["key", "create", "nobody", "--rpm", "5"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
}

#[tokio::test]
async fn updates_set_and_remove_limits() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    run(&ledger, &["account", "create", "acme", "--balance", "10"]).await.unwrap();
    let out = run(&ledger, &["key", "create", "acme"]).await.unwrap();
    let key = out.trim_end();
    let prefix = &key[..14];

    let out = run(&ledger, &["key", "update", "1", "--rpm", "600", "--tpm", "60_000"]).await.unwrap();
    assert_eq!(out, format!("key 1 ({prefix}…) of account acme: limits rpm 600, tpm 60000\n"));
    // By the whole key; only what is named changes.
    let out = run(&ledger, &["key", "update", key, "--rpm", "none", "--monthly-spend", "20"]).await.unwrap();
    assert_eq!(out, format!("key 1 ({prefix}…) of account acme: limits tpm 60000, monthly_spend 20.00 USD\n"));
    let out = run(&ledger, &["key", "update", "1", "--tpm", "off", "--monthly-spend", "none"]).await.unwrap();
    assert_eq!(out, format!("key 1 ({prefix}…) of account acme: limits none\n"));

    let out =
        run(&ledger, &["account", "update", "acme", "--concurrency", "8", "--monthly-spend", "100"]).await.unwrap();
    assert_eq!(out, "account acme: limits concurrency 8, monthly_spend 100.00 USD\n");
    let who = ledger.authenticate(key).await.unwrap().unwrap();
    let limits = who.limits.unwrap();
    assert!(limits.key.is_empty());
    assert_eq!((limits.account.concurrency, limits.account.monthly_spend_nanos), (Some(8), Some(100_000_000_000)));

    let out = run(&ledger, &["account", "show", "acme"]).await.unwrap();
    assert_eq!(
        out,
        "ACCOUNT    acme\nBALANCE    10.00 USD\nRESERVED   0.00 USD\nAVAILABLE  10.00 USD\n\
         LIMITS     concurrency 8, monthly_spend 100.00 USD\n"
    );
    let out = run(&ledger, &["account", "show", "acme", "--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["limits"],
        serde_json::json!({"rpm": null, "tpm": null, "tpd": null, "concurrency": 8,
                           "daily_spend_nanos": null, "monthly_spend_nanos": 100_000_000_000i64})
    );
    let out = run(&ledger, &["account", "update", "acme", "--concurrency", "none"]).await.unwrap();
    assert_eq!(out, "account acme: limits monthly_spend 100.00 USD\n");
}

#[tokio::test]
async fn updates_and_show_name_what_is_unknown() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let err = run(&ledger, &["key", "update", "42", "--rpm", "5"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key with id 42 in this ledger");
    let err = run(&ledger, &["key", "update", "sk-sluice-AbCdEfGhIjKl", "--rpm", "5"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key sk-sluice-AbCd… in this ledger");
    let err = run(&ledger, &["key", "show", "42"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key with id 42 in this ledger");
    let err = run(&ledger, &["key", "show", "acme", "--json"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no API key \"acme\" in this ledger");
    let err = run(&ledger, &["account", "update", "nobody", "--concurrency", "2"]).await.unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
}

#[tokio::test]
async fn key_show_prints_the_key_its_limits_and_their_use() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    run(&ledger, &["account", "create", "acme", "--balance", "10"]).await.unwrap();
    let key = run(&ledger, &["key", "create", "acme"]).await.unwrap();
    let key = key.trim_end();
    let k = ledger.keys("acme").await.unwrap().remove(0);
    let head = format!(
        "ID         1\nPREFIX     {}\nACCOUNT    acme\nCREATED    {}\nREVOKED    -\n",
        k.prefix,
        format_utc(k.created_at)
    );
    let out = run(&ledger, &["key", "show", "1"]).await.unwrap();
    assert_eq!(out, format!("{head}LIMITS     none\n"));

    run(&ledger, &["key", "update", "1", "--rpm", "600", "--tpm", "60000", "--daily-spend", "2.50"]).await.unwrap();
    run(&ledger, &["account", "update", "acme", "--concurrency", "8", "--monthly-spend", "100"]).await.unwrap();
    // One request half-way through T0's minute: 100 tokens and 0.01 USD estimated,
    // 80 tokens and 0.005 USD used; the limiter gives back all it held beyond that.
    let who = ledger.authenticate(key).await.unwrap().unwrap();
    let of = who.limits.unwrap();
    let limits =
        [(crate::limits::Subject::Key(of.key_id), of.key), (crate::limits::Subject::Account(who.id), of.account)];
    let limiter = crate::limits::Limiter::new(ledger.clone(), crate::limits::LimiterConfig::new("gw-1"), None);
    let ask = crate::limits::Ask { tokens: 100, spend_nanos: 10_000_000 };
    let admission = limiter.admit(&limits, ask, T0 + 30_000).await.unwrap();
    // While it runs, leases hold more than it uses: what `USED` counts.
    let out = run_at(&ledger, &["key", "show", key], at_ms(T0 + 30_000)).await.unwrap();
    let concurrency: Vec<&str> =
        out.lines().find(|l| l.starts_with("concurrency")).unwrap().split_whitespace().collect();
    assert_eq!(concurrency[..3], ["concurrency", "account", "8"], "{out}");
    assert!(concurrency[3].parse::<i64>().unwrap() >= 1, "a request in flight: {out}");
    admission.settle(80, 5_000_000);
    limiter.shutdown().await;

    let out = run_at(&ledger, &["key", "show", key], at_ms(T0 + 30_000)).await.unwrap();
    assert_eq!(
        out,
        format!(
            "{head}\n\
             LIMIT          OF       VALUE   USED   ALLOWED-NOW  WINDOW-ENDS\n\
             rpm            key      600     1      600          2026-12-05T00:01:00Z\n\
             tpm            key      60000   80     60000        2026-12-05T00:01:00Z\n\
             daily_spend    key      2.50    0.005  2.50         2026-12-06T00:00:00Z\n\
             concurrency    account  8       0      8            -\n\
             monthly_spend  account  100.00  0.005  100.00       2027-01-01T00:00:00Z\n"
        )
    );

    // A quarter into the next minute, three quarters of the last one's use still weigh.
    let out = run_at(&ledger, &["key", "show", "1", "--json"], at_ms(T0 + 75_000)).await.unwrap();
    assert!(out.ends_with("}\n") && !out.trim_end().contains('\n'), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "id": 1, "account": "acme", "prefix": k.prefix, "created": format_utc(k.created_at), "revoked": null,
            "limits": {"rpm": 600, "tpm": 60000, "tpd": null, "concurrency": null,
                       "daily_spend_nanos": 2_500_000_000i64, "monthly_spend_nanos": null},
            "account_limits": {"rpm": null, "tpm": null, "tpd": null, "concurrency": 8,
                               "daily_spend_nanos": null, "monthly_spend_nanos": 100_000_000_000i64},
            "use": [
                {"of": "key", "limit": "rpm", "value": 600, "used": 0, "allowed_now": 599,
                 "window_end": "2026-12-05T00:02:00Z"},
                {"of": "key", "limit": "tpm", "value": 60000, "used": 0, "allowed_now": 59940,
                 "window_end": "2026-12-05T00:02:00Z"},
                {"of": "key", "limit": "daily_spend", "value": 2_500_000_000i64, "used": 5_000_000,
                 "allowed_now": 2_500_000_000i64, "window_end": "2026-12-06T00:00:00Z"},
                {"of": "account", "limit": "concurrency", "value": 8, "used": 0, "allowed_now": 8,
                 "window_end": null},
                {"of": "account", "limit": "monthly_spend", "value": 100_000_000_000i64, "used": 5_000_000,
                 "allowed_now": 100_000_000_000i64, "window_end": "2027-01-01T00:00:00Z"},
            ]
        })
    );

    // A revoked key still shows, with when it was revoked.
    run(&ledger, &["key", "revoke", "1"]).await.unwrap();
    let out = run(&ledger, &["key", "show", "1", "--json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let revoked = ledger.keys("acme").await.unwrap()[0].revoked_at.unwrap();
    assert_eq!(v["revoked"], format_utc(revoked));
}
