use super::*;

#[test]
fn env_path_sets_nested_keys() {
    let mut t = toml::Table::new();
    set_path(
        &mut t,
        &["webhooks".into(), "allow_private_targets".into()],
        parse_env_value("true"),
    );
    set_path(
        &mut t,
        &["test".into(), "block_interval_ms".into()],
        parse_env_value("250"),
    );
    let cfg: Config = toml::Value::Table(t).try_into().unwrap();
    assert!(cfg.webhooks.allow_private_targets);
    assert_eq!(cfg.webhooks.retry_schedule_s.len(), 7);
    assert_eq!(cfg.test.block_interval_ms, 250);
    assert_eq!(cfg.listen, "127.0.0.1:8080");
}

#[test]
fn test_retain_blocks_is_bounded() {
    let env = |v: &str| vec![("APPLIANCE_TEST__RETAIN_BLOCKS".to_string(), v.to_string())];
    let cfg = Config::load_from(None, env("64")).unwrap();
    assert_eq!(cfg.test.retain_blocks, 64);
    assert!(cfg.validate().is_ok());
    for bad in ["63", "100001"] {
        let cfg = Config::load_from(None, env(bad)).unwrap();
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("test.retain_blocks"), "{bad}: {e}");
    }
    assert_eq!(
        Config::default().test.retain_blocks,
        appliance_chains::sim::RETAIN_BLOCKS
    );
}

#[test]
fn the_example_config_loads_under_the_strict_rules() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml.example");
    let cfg = Config::load_from(Some(&f), Vec::new()).expect("config.toml.example");
    assert!(!cfg.allow_plain_http);
    // Every commented-out `key = value` line of a table is a known key too.
    let text = std::fs::read_to_string(&f).unwrap();
    let uncommented: String = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            match t.strip_prefix("# ") {
                Some(rest)
                    if rest.starts_with('[')
                        || rest.split_once(" = ").is_some_and(|(k, _)| {
                            !k.contains(' ')
                                && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        }) =>
                {
                    rest.to_string()
                }
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    if let Ok(table) = uncommented.parse::<toml::Table>() {
        let r: Result<Config, _> = serde_path_to_error::deserialize(toml::Value::Table(table));
        if let Err(e) = r {
            let m = e.inner().message().to_string();
            assert!(!m.starts_with("unknown field"), "{}: {m}", e.path());
        }
    }
}

#[test]
fn the_example_ships_the_built_in_plans_and_bad_plans_are_refused() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml.example");
    let cfg = Config::load_from(Some(&f), Vec::new()).expect("config.toml.example");
    assert_eq!(cfg.billing.plans, BillingConfig::default().plans);
    assert!(cfg.billing.plan("drift").unwrap().self_selectable);
    assert!(!cfg.billing.plan("enterprise").unwrap().self_selectable);
    let plan = |extra: &str| -> Result<(), String> {
        let text =
            format!("[[billing.plans]]\nkey = \"p\"\nname = \"P\"\ncap_cents = 100\n{extra}");
        let cfg: Config = toml::from_str(&text).map_err(|e| e.to_string())?;
        cfg.billing.validate()
    };
    assert!(plan("").is_ok());
    assert!(plan("rate_bps = 10001\n").is_err());
    assert!(plan("onboarding_fee_cents = 1000000001\n").is_err());
    assert!(plan("fee = 1\n").unwrap_err().contains("unknown field"));
    let two = "[[billing.plans]]\nkey = \"p\"\nname = \"Q\"\ncap_cents = 1\n";
    assert!(plan(two).unwrap_err().contains("twice"));
    let cfg: Config =
        toml::from_str("[[billing.plans]]\nkey = \"Big Plan\"\nname = \"B\"\ncap_cents = 1\n")
            .unwrap();
    assert!(cfg.billing.validate().is_err());
    // cap_cents is required.
    assert!(toml::from_str::<Config>("[[billing.plans]]\nkey = \"p\"\nname = \"P\"\n").is_err());
}

#[test]
fn closest_names_the_intended_key() {
    let v = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let top = v(&["listen", "data_dir", "tls", "signing", "webhooks", "chains"]);
    assert_eq!(closest("listen_addr", &top).as_deref(), Some("listen"));
    assert_eq!(closest("tsl", &top).as_deref(), Some("tls"));
    assert_eq!(closest("zzz", &top), None);
    assert_eq!(
        closest(
            "pasphrase_env",
            &v(&["enabled", "passphrase_env", "passphrase_file"])
        )
        .as_deref(),
        Some("passphrase_env")
    );
}

#[test]
fn unknown_keys_name_their_path_and_origin() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config.toml");
    std::fs::write(&f, "[webhooks]\nallow_private_target = true\n").unwrap();
    let e = Config::load_from(Some(&f), Vec::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("unknown key webhooks.allow_private_target in ")
            && e.ends_with("(did you mean allow_private_targets?)"),
        "{e}"
    );
    let env = vec![(
        "APPLIANCE_STORAGE__QUICK_REPAIRS".to_string(),
        "true".to_string(),
    )];
    let e = Config::load_from(None, env).unwrap_err().to_string();
    assert!(
        e.contains("environment variable APPLIANCE_STORAGE__QUICK_REPAIRS"),
        "{e}"
    );
    assert!(
        e.contains("did you mean APPLIANCE_STORAGE__QUICK_REPAIR?"),
        "{e}"
    );
    // A variable named by a `*_env` key is a secret, not configuration.
    std::fs::write(&f, "[signing]\npassphrase_env = \"APPLIANCE_SEED_PASS\"\n").unwrap();
    let env = vec![("APPLIANCE_SEED_PASS".to_string(), "x".to_string())];
    assert!(Config::load_from(Some(&f), env).is_ok());
}

fn chain(text: &str) -> Result<(), String> {
    let cfg: Config = toml::from_str(text).map_err(|e| e.to_string())?;
    cfg.chains["ethereum"].check_urls("ethereum")
}

#[test]
fn a_chain_takes_one_rpc_url_or_several_rpc_urls_in_order() {
    let cfg: Config =
        toml::from_str("[chains.ethereum]\nrpc_urls = [\"http://a:1/k\", \"https://b/v3/K\"]\n")
            .unwrap();
    assert_eq!(
        cfg.chains["ethereum"].urls(),
        vec!["http://a:1/k".to_string(), "https://b/v3/K".to_string()]
    );
    assert!(chain("[chains.ethereum]\nrpc_url = \"http://a:1\"\n").is_ok());
    // From the environment: one comma-separated string.
    let mut t = toml::Table::new();
    set_path(
        &mut t,
        &["chains".into(), "ethereum".into(), "rpc_urls".into()],
        parse_env_value("http://a:1, http://b:2"),
    );
    let cfg: Config = toml::Value::Table(t).try_into().unwrap();
    assert_eq!(cfg.chains["ethereum"].urls().len(), 2);
    let e = chain("[chains.ethereum]\nrpc_url = \"http://a\"\nrpc_urls = [\"http://b\"]\n");
    assert!(e.unwrap_err().contains("both rpc_url and rpc_urls"));
    let e = chain("[chains.ethereum]\nconfirmations = 3\n");
    assert!(e.unwrap_err().contains("needs rpc_url"));
    let e = chain("[chains.ethereum]\nrpc_urls = []\n");
    assert!(e.unwrap_err().contains("needs rpc_url"));
    let e = chain("[chains.ethereum]\nrpc_urls = [\"http://a:1\", \" \"]\n");
    assert!(e.unwrap_err().contains("rpc_urls is empty"));
    // Messages never show a URL's secret part.
    let e = chain("[chains.ethereum]\nrpc_urls = [\"ftp://u:pw@h/v3/SECRET\"]\n").unwrap_err();
    assert!(e.contains("ftp://h is not an http"), "{e}");
    let e =
        chain("[chains.ethereum]\nrpc_urls = [\"https://h/v3/SECRET\", \"https://h/v3/SECRET\"]\n")
            .unwrap_err();
    assert!(
        e.contains("https://h twice") && !e.contains("SECRET"),
        "{e}"
    );
    let many: Vec<String> = (0..=MAX_RPC_URLS)
        .map(|i| format!("\"http://n{i}\""))
        .collect();
    let e = chain(&format!(
        "[chains.ethereum]\nrpc_urls = [{}]\n",
        many.join(",")
    ));
    assert!(e.unwrap_err().contains("at most"));
    // Unknown keys stay refused.
    assert!(chain("[chains.ethereum]\nrpc_url = \"http://a\"\nrpc_uris = []\n").is_err());
}

#[test]
fn retry_schedule_reads_a_list_or_a_string() {
    let mut t = toml::Table::new();
    set_path(
        &mut t,
        &["webhooks".into(), "retry_schedule_s".into()],
        parse_env_value("1,2, 3"),
    );
    let cfg: Config = toml::Value::Table(t).try_into().unwrap();
    assert_eq!(cfg.webhooks.retry_schedule_s, vec![1, 2, 3]);
    let cfg: Config = toml::from_str("[webhooks]\nretry_schedule_s = [5, 6]\n").unwrap();
    assert_eq!(cfg.webhooks.retry_schedule_s, vec![5, 6]);
    assert!(cfg.webhooks.validate().is_ok());
}
