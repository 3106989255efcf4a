use std::path::Path;

use crate::config::tests::MINIMAL as BASE;
use crate::config::{Config, ConfigError};

/// A directory with a config file and a schema beside it, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("config-contracts-{name}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("schemas")).unwrap();
        std::fs::write(
            dir.join("schemas/order.json"),
            r#"{"type": "object", "required": ["amount"]}"#,
        )
        .unwrap();
        Dir(dir)
    }

    fn load(&self, contracts: &str) -> Result<Config, ConfigError> {
        let path = self.0.join("relay.toml");
        std::fs::write(&path, format!("{BASE}\n{contracts}")).unwrap();
        Config::load(Some(&path), Vec::new())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn invalid(result: Result<Config, ConfigError>) -> (String, String) {
    match result {
        Err(ConfigError::Invalid { field, constraint }) => (field, constraint),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
}

#[test]
fn a_relative_schema_path_starts_at_the_config_files_directory() {
    let dir = Dir::new("relative");
    let config = dir
        .load("[[contracts]]\naggregatetype = \"order\"\nschema = \"schemas/order.json\"\n")
        .expect("the schema beside the config loads, whatever the working directory");
    assert_eq!(config.config_dir.as_deref(), Some(dir.0.as_path()));
    let contracts = config.contracts().unwrap();
    let schema = contracts.find("order", "order.placed").expect("a contract");
    assert_eq!(schema.name(), "schemas/order.json");
    assert!(schema.check(br#"{"amount": 1}"#).is_ok());
    assert!(schema.check(br#"{}"#).is_err());
    assert!(contracts.find("customer", "customer.created").is_none());
    let settings = config.relay_settings().unwrap();
    assert_eq!(settings.contracts, contracts);
}

#[test]
fn a_contract_that_cannot_be_used_names_its_entry_and_the_fix() {
    let dir = Dir::new("broken");
    let (field, constraint) = invalid(dir.load(
        "[[contracts]]\ntype = \"a\"\nschema = \"schemas/order.json\"\n\n\
         [[contracts]]\ntype = \"b\"\nschema = \"schemas/missing.json\"\n",
    ));
    assert_eq!(field, "contracts[1].schema");
    assert!(constraint.contains("missing.json"), "{constraint}");

    std::fs::write(dir.0.join("schemas/bad.json"), r#"{"type": 5}"#).unwrap();
    let (field, constraint) = invalid(dir.load("[[contracts]]\nschema = \"schemas/bad.json\"\n"));
    assert_eq!(field, "contracts[0].schema");
    assert!(
        constraint.contains("not a valid JSON Schema"),
        "{constraint}"
    );

    let (field, _) = invalid(dir.load("[[contracts]]\ntype = \"a\"\n"));
    assert_eq!(field, "contracts[0].schema");
    let (field, _) =
        invalid(dir.load("[[contracts]]\ntype = \"\"\nschema = \"schemas/order.json\"\n"));
    assert_eq!(field, "contracts[0].type");

    let unknown = dir.load("[[contracts]]\nschema = \"schemas/order.json\"\nsubjet = \"x\"\n");
    assert!(matches!(unknown, Err(ConfigError::Parse(_))), "{unknown:?}");
}

#[test]
fn an_absolute_schema_path_is_taken_as_it_is() {
    let dir = Dir::new("absolute");
    let absolute = dir.0.join("schemas/order.json");
    let config = dir
        .load(&format!(
            "[[contracts]]\nschema = {:?}\n",
            absolute.display().to_string()
        ))
        .unwrap();
    let contracts = config.contracts().unwrap();
    assert!(contracts.find("any", "thing").is_some());
    assert_eq!(
        config.contracts[0].schema_path(Some(Path::new("/elsewhere"))),
        absolute
    );
}

/// `[registry]` and a registry contract, with `extra` keys in the contract.
fn registry(contract: &str) -> String {
    format!(
        "[registry]\nurl = \"http://127.0.0.1:1/apis/ccompat/v7\"\npassword = \"Canary-Registry-Secret\"\nusername = \"u\"\n\n[[contracts]]\naggregatetype = \"order\"\n{contract}\n"
    )
}

#[test]
fn a_registry_contract_names_its_subject_when_the_config_loads() {
    use crate::contracts::RegistryContract;
    let dir = Dir::new("registry");
    let config = dir
        .load(&registry("subject_strategy = \"topic\"\nversion = 3"))
        .unwrap();
    let contracts = config.contracts().unwrap();
    assert!(contracts.needs_registry());
    let kept = config.registry_contract(0, &config.contracts[0]).unwrap();
    assert_eq!(
        kept,
        RegistryContract {
            subject: "outbox.event.order-value".into(),
            version: Some(3),
            frame: true,
            dataschema: None,
            record: None,
        }
    );
    let record = dir
        .load(&registry(
            "subject_strategy = \"topic-record\"\nrecord = \"com.acme.OrderPlaced\"\nframing = \"none\"",
        ))
        .unwrap();
    let kept = record.registry_contract(0, &record.contracts[0]).unwrap();
    assert_eq!(kept.subject, "outbox.event.order-com.acme.OrderPlaced");
    assert!(!kept.frame);
    // The password never shows.
    let shown = format!("{:?} {}", record.registry, record.effective_toml());
    assert!(!shown.contains("Canary-Registry-Secret"), "{shown}");
}

#[test]
fn a_registry_contract_the_relay_cannot_place_is_refused_naming_the_key() {
    let dir = Dir::new("registry-refused");
    let cases = [
        // No [registry].
        ("[[contracts]]\nsubject = \"s\"\n".to_owned(), "registry.url"),
        (registry("subject = \"s\"\nschema = \"schemas/order.json\""), "contracts[0].schema"),
        (registry("subject = \"s\"\nsubject_strategy = \"topic\""), "contracts[0].subject_strategy"),
        (registry("subject_strategy = \"record\""), "contracts[0].record"),
        (registry("subject = \"s\"\nversion = 0"), "contracts[0].version"),
        (
            "[registry]\nurl = \"http://r/\"\n[[contracts]]\naggregatetype = \"ord*\"\nsubject_strategy = \"topic\"\n".to_owned(),
            "contracts[0].subject_strategy",
        ),
        (
            "[registry]\nurl = \"http://r/\"\n[[contracts]]\nschema = \"schemas/order.json\"\nversion = 2\n".to_owned(),
            "contracts[0].version",
        ),
        (
            "[registry]\nurl = \"ftp://r/\"\n[[contracts]]\nsubject = \"s\"\n".to_owned(),
            "registry.url",
        ),
    ];
    for (toml, field) in cases {
        let (got, constraint) = invalid(dir.load(&toml));
        assert_eq!(got, field, "{toml}: {constraint}");
    }
    let structured = dir.load(&format!(
        "{}\n[cloudevents]\nmode = \"structured\"\n",
        registry("subject = \"s\"")
    ));
    // `[cloudevents]` appears twice in that TOML: build it through the
    // environment instead.
    drop(structured);
    let path = dir.0.join("relay.toml");
    std::fs::write(&path, format!("{BASE}\n{}", registry("subject = \"s\""))).unwrap();
    let result = Config::load(
        Some(&path),
        vec![(
            "OUTBOX_RELAY__CLOUDEVENTS__MODE".to_owned(),
            "structured".to_owned(),
        )],
    );
    let (field, constraint) = invalid(result);
    assert_eq!(field, "contracts[0].subject");
    assert!(constraint.contains("binary"), "{constraint}");
}

#[test]
fn a_schema_whose_keyword_checks_nothing_is_refused_naming_its_entry() {
    let dir = Dir::new("misspelled");
    std::fs::write(
        dir.0.join("schemas/typo.json"),
        r#"{"type": "object", "requird": ["amount"]}"#,
    )
    .unwrap();
    let (field, constraint) = invalid(dir.load(
        "[[contracts]]\ntype = \"a\"\nschema = \"schemas/order.json\"\n\n\
         [[contracts]]\ntype = \"b\"\nschema = \"schemas/typo.json\"\n",
    ));
    assert_eq!(field, "contracts[1].schema");
    assert!(
        constraint.contains(
            "at /requird in the schema: unknown keyword \"requird\" (did you mean \"required\"?)"
        ),
        "{constraint}"
    );
}
