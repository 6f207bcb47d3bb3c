//! `sluice-gateway demo`, the README's first command, run end to end: its traffic speaks
//! the three inbound APIs (Chat Completions, Messages as Claude Code sends it, Responses
//! as Codex does) through the quickstart's routes, and it closes with the summary, the
//! bill and the error budgets.

use sluice_tests::process;

#[tokio::test]
async fn the_demo_serves_every_inbound_api_and_closes_with_its_summary() -> anyhow::Result<()> {
    let _serial = sluice_tests::serial().await;
    let out = process::run(&["demo", "--duration", "6s", "--rate", "10", "--no-colour"]).await?;
    assert_eq!(out.code, Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let by_api = out.stdout.lines().find(|l| l.trim_start().starts_with("by API")).unwrap_or_default();
    for api in ["chat/completions", "messages", "responses"] {
        // `API OK/REQUESTS`: some of each asked, and some of each answered.
        let counts = by_api.split(", ").find_map(|part| part.trim().rsplit_once(' ').filter(|(a, _)| a.ends_with(api)));
        let (ok, asked) = counts.and_then(|(_, c)| c.split_once('/')).unwrap_or(("0", "0"));
        let (ok, asked): (u32, u32) = (ok.parse()?, asked.parse()?);
        assert!(ok > 0 && asked > 0, "{api}: {ok}/{asked} in {by_api:?}\n{}", out.stdout);
    }
    for part in ["Summary", "client-visible availability", "billed to account \"demo\"", "Error budgets"] {
        assert!(out.stdout.contains(part), "no {part:?} in:\n{}", out.stdout);
    }
    Ok(())
}
