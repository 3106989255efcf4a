//! `check`'s items for `[[contracts]]`: the schema files compiled (the
//! config did that), and each registry subject there, at the version the
//! relay would take, compiled as the relay compiles it (a schema it could
//! not use fails here, not at the start). A pinned version that is not the
//! latest is a warning saying whether the latest is compatible with it, by
//! the subject's own compatibility rule.

use super::Item;
use crate::config::Config;
use crate::contracts::Schema;
use crate::registry::{RegistryClient, RegistryError};

/// The items, none when there are no contracts.
pub async fn items(config: &Config) -> Vec<Item> {
    if config.contracts.is_empty() {
        return Vec::new();
    }
    let contracts = match config.contracts() {
        Ok(contracts) => contracts,
        Err(e) => return vec![Item::fail("contracts", e.to_string())],
    };
    let (kept, registry) = contracts.registry_contracts();
    let files = config.contracts.len() - kept.len();
    let mut items = Vec::new();
    if files > 0 {
        items.push(Item::ok(
            "contracts.files",
            format!("{files} contract(s) with a JSON Schema file, each compiled"),
        ));
    }
    let Some(registry) = registry.filter(|_| !kept.is_empty()) else {
        return items;
    };
    let client = match RegistryClient::new(registry) {
        Ok(client) => client,
        Err(e) => {
            items.push(Item::fail("registry", e.to_string()).fix("check registry.url"));
            return items;
        }
    };
    for contract in kept {
        let name = format!("registry.subject.{}", contract.subject);
        let fetched = match contract.version {
            Some(n) => client.version(&contract.subject, n).await,
            None => client.latest(&contract.subject).await,
        };
        let version = match fetched {
            Ok(version) => version,
            Err(e) => {
                let fix = if e.is_retryable() {
                    "check that the registry runs and registry.url points at its API root"
                } else if matches!(e, RegistryError::NotARegistry { .. }) {
                    "set registry.url to the root of the registry's Confluent-compatible API \
                     (Confluent: http://host:8081; Apicurio: http://host:8080/apis/ccompat/v7)"
                } else {
                    "register the schema under the subject, or correct the contract's subject \
                     or version"
                };
                items.push(Item::fail(name, e.to_string()).fix(fix));
                continue;
            }
        };
        if let Err(e) = Schema::from_registry(&version, client.url(), contract) {
            items.push(Item::fail(name, e.to_string()).fix(
                "correct the subject's schema, or the contract's record (the Avro record, or \
                 the Protobuf message, it names)",
            ));
            continue;
        }
        let what = format!(
            "version {} (schema id {}, {})",
            version.version,
            version.id,
            version.schema.schema_type.as_str()
        );
        if contract.version.is_none() {
            items.push(Item::ok(
                name,
                format!("{what}: the latest, which the relay takes"),
            ));
            continue;
        }
        let latest = match client.latest(&contract.subject).await {
            Ok(latest) => latest,
            Err(e) => {
                items.push(Item::warn(name, format!("{what} pinned; the latest: {e}")));
                continue;
            }
        };
        if latest.version == version.version {
            items.push(Item::ok(name, format!("{what}, pinned: the latest")));
            continue;
        }
        let item = match client
            .compatible_with_latest(&contract.subject, &version.schema)
            .await
        {
            Ok(true) => Item::warn(
                name,
                format!(
                    "{what} pinned; version {} is the latest and compatible with it by the \
                     subject's rule",
                    latest.version
                ),
            )
            .fix("move the contract's version on when consumers are ready"),
            Ok(false) => Item::warn(
                name,
                format!(
                    "{what} pinned; version {} is the latest and NOT compatible with it: \
                     consumers on the latest cannot read what the relay sends",
                    latest.version
                ),
            )
            .fix("agree the versions with the consumers before moving the pin"),
            Err(e) => Item::warn(
                name,
                format!(
                    "{what} pinned; version {} is the latest (compatibility unknown: {e})",
                    latest.version
                ),
            ),
        };
        items.push(item);
    }
    items
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::registry::tests::Routed;

    #[tokio::test]
    async fn a_registry_url_that_is_no_registrys_root_is_not_fixed_by_registering() {
        // Nothing answers as a registry here: every path is a 404.
        let server = Routed::start(Vec::new()).await;
        let toml = format!(
            "[postgres]\nurl = \"postgres://relay:pw@127.0.0.1:5432/app\"\nslot = \"s\"\n\
             publication = \"p\"\n\n[kafka]\nbrokers = \"127.0.0.1:9092\"\n\n\
             [cloudevents]\nsource = \"/s\"\n\n[registry]\nurl = \"{}\"\n\n\
             [[contracts]]\nsubject = \"orders-value\"\n",
            server.url("/apis/ccompat/v6")
        );
        let config = Config::from_figment(&Config::figment_from_str(&toml, Vec::new())).unwrap();
        let items = super::items(&config).await;
        let item = items
            .iter()
            .find(|i| i.name == "registry.subject.orders-value")
            .expect("the subject's item");
        assert!(
            item.detail.contains("does not look like a schema registry"),
            "{item:?}"
        );
        let fix = item.fix.as_deref().unwrap_or_default();
        assert!(fix.starts_with("set registry.url to the root"), "{fix}");
    }
}
