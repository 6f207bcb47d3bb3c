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
    let a = parse(&[
        "--ledger",
        "sqlite://x.db",
        "account",
        "create",
        "team-a",
        "--balance",
        "15.00",
    ])
    .unwrap();
    assert_eq!(a.ledger, "sqlite://x.db");
    assert_eq!(
        a.command,
        AdminCommand::Account(AccountCommand::Create {
            name: "team-a".into(),
            balance: 15_000_000_000
        })
    );
    let a = parse(&["key", "create", "team-a", "--json"]).unwrap();
    assert_eq!(
        a.command,
        AdminCommand::Key(KeyCommand::Create {
            account: "team-a".into(),
            json: true
        })
    );
    let err = parse(&["account", "topup", "team-a", "--amount", "-3"]).unwrap_err();
    assert!(
        err.to_string().contains("amounts must not be negative"),
        "{err}"
    );
}

#[tokio::test]
async fn account_and_key_commands_print_the_contract() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let out = run(
        &ledger,
        &["account", "create", "team-a", "--balance", "15.00"],
    )
    .await
    .unwrap();
    assert_eq!(out, "created account team-a with balance 15.00 USD\n");
    let out = run(&ledger, &["account", "topup", "team-a", "--amount", "0.5"])
        .await
        .unwrap();
    assert_eq!(
        out,
        "topped up account team-a by 0.50 USD; balance 15.50 USD\n"
    );

    let out = run(&ledger, &["account", "show", "team-a", "--json"])
        .await
        .unwrap();
    assert_eq!(
        out,
        "{\"account\":\"team-a\",\"balance_nanodollars\":15500000000,\
         \"reserved_nanodollars\":0,\"balance_usd\":\"15.50\"}\n"
    );
    let out = run(&ledger, &["account", "show", "team-a"]).await.unwrap();
    assert_eq!(
        out,
        "ACCOUNT    team-a\nBALANCE    15.50 USD\nRESERVED   0.00 USD\nAVAILABLE  15.50 USD\n"
    );

    let out = run(&ledger, &["key", "create", "team-a"]).await.unwrap();
    let key = out.strip_suffix('\n').unwrap();
    assert!(key.starts_with("sk-sluice-") && !key.contains(char::is_whitespace));
    let who = ledger.authenticate(key).await.unwrap().unwrap();
    assert_eq!(who.name, "team-a");

    let out = run(&ledger, &["key", "create", "team-a", "--json"])
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["account"], "team-a");
    assert!(v["key"].as_str().unwrap().starts_with("sk-sluice-"));
    assert_eq!(v.as_object().unwrap().len(), 2);
}

#[tokio::test]
async fn errors_name_the_account() {
    let ledger = Ledger::connect("sqlite::memory:").await.unwrap();
    let err = run(&ledger, &["account", "show", "nobody"])
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
    let err = run(&ledger, &["key", "create", "nobody"])
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no account named \"nobody\"");
    run(&ledger, &["account", "create", "a", "--balance", "1"])
        .await
        .unwrap();
    let err = run(&ledger, &["account", "create", "a", "--balance", "1"])
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "account \"a\" already exists");
}
