//! The checkpoint topic of exactly-once delivery as the relay needs it:
//! one partition, compacted (docs/exactly-once.md). `init` creates it
//! ([`create`]); `init`, `check` and `run` judge it by one verdict
//! ([`judge`]); `run` refuses to start on a topic that is missing or not
//! compacted ([`CheckpointTopicRefused`]).
//!
//! Invariant: looking at the topic never creates it. A broker with
//! `auto.create.topics.enable` creates a missing topic for any client that
//! names it in a metadata request allowing creation (what a producer or an
//! admin client allows unless told otherwise), with the broker's defaults:
//! not compacted, `num.partitions` partitions. [`look`] asks with
//! `allow.auto.create.topics = false`, whatever `[kafka.properties]` says.
//! The relay looks before its transactional producer first names the topic
//! (its first checkpoint record), so a topic that is missing at start stays
//! missing and the relay says so.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, OwnedResourceSpecifier, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

/// The command that sets the checkpoint topic up, as the messages name it
/// (with the config in use: [`crate::invocation::command`]).
pub fn init_command() -> String {
    crate::invocation::command("init")
}

/// The command that creates the checkpoint topic as exactly-once delivery
/// needs it: compacted, so that the last checkpoint is never deleted, and
/// of one partition. What `init` does, for those who create topics by hand.
pub fn create_command(brokers: &str, topic: &str) -> String {
    format!(
        "kafka-topics.sh --bootstrap-server {brokers} --create --topic {topic} --partitions 1 \
         --config cleanup.policy=compact"
    )
}

/// The command that makes an existing checkpoint topic compacted (only):
/// its records are checkpoints keyed by transactional id, and compaction
/// keeps the last of each key, which is all the relay reads.
pub fn compact_command(brokers: &str, topic: &str) -> String {
    format!(
        "kafka-configs.sh --bootstrap-server {brokers} --alter --entity-type topics \
         --entity-name {topic} --add-config cleanup.policy=compact"
    )
}

/// What the cluster says about the checkpoint topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Looked {
    Missing,
    Exists {
        partitions: usize,
        /// Its `cleanup.policy`, or why it could not be read.
        cleanup_policy: Result<String, String>,
    },
}

/// The one verdict on the checkpoint topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// One partition, compacted only.
    Ready,
    /// One partition, compacted, and deleted by retention too: an idle
    /// relay loses its checkpoint after the retention time.
    AlsoDeletes {
        policy: String,
    },
    /// One partition; whether it is compacted is unknown.
    PolicyUnknown {
        why: String,
    },
    Missing,
    /// More than one partition: the last checkpoint cannot be told.
    Partitioned {
        partitions: usize,
    },
    /// Retention would delete the last checkpoint.
    NotCompacted {
        policy: String,
    },
}

fn policies(policy: &str) -> impl Iterator<Item = &str> {
    policy.split(',').map(str::trim)
}

/// Judges what [`look`] (or `check`'s cluster facts) found.
pub fn judge(looked: &Looked) -> Verdict {
    match looked {
        Looked::Missing => Verdict::Missing,
        Looked::Exists { partitions, .. } if *partitions > 1 => Verdict::Partitioned {
            partitions: *partitions,
        },
        Looked::Exists {
            cleanup_policy: Err(why),
            ..
        } => Verdict::PolicyUnknown { why: why.clone() },
        Looked::Exists {
            cleanup_policy: Ok(policy),
            ..
        } => {
            if !policies(policy).any(|p| p == "compact") {
                Verdict::NotCompacted {
                    policy: policy.clone(),
                }
            } else if policies(policy).any(|p| p == "delete") {
                Verdict::AlsoDeletes {
                    policy: policy.clone(),
                }
            } else {
                Verdict::Ready
            }
        }
    }
}

/// Why `run` does not start on the checkpoint topic (exit code 4). (One of
/// more than one partition is refused by the checkpoint read, which must
/// not read it: [`super::CheckpointReadError::Partitioned`].)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointTopicRefused {
    #[error(
        "checkpoint topic \"{topic}\" does not exist: exactly-once delivery keeps the relay's \
         position there, in a compacted topic of one partition (one the broker creates on first \
         use has its defaults, not compacted, so the relay never has it created). Create it with \
         `{}` (or: {}), then start the relay again",
        init_command(),
        create_command(brokers, topic)
    )]
    Missing { topic: String, brokers: String },
    #[error(
        "checkpoint topic \"{topic}\" is not compacted (cleanup.policy={policy}): retention \
         would delete the relay's last checkpoint, and a relay started without it writes again \
         what Kafka already holds. (A topic the broker created on first use, or re-created \
         after it was deleted, has the broker's defaults.) Make it compacted: {}, then start \
         the relay again (`{}` shows the topic)",
        compact_command(brokers, topic),
        crate::invocation::command("check")
    )]
    NotCompacted {
        topic: String,
        policy: String,
        brokers: String,
    },
}

impl CheckpointTopicRefused {
    /// The refusal `verdict` means for `run`, if any.
    pub fn of(verdict: &Verdict, topic: &str, brokers: &str) -> Option<Self> {
        match verdict {
            Verdict::Missing => Some(CheckpointTopicRefused::Missing {
                topic: topic.to_owned(),
                brokers: brokers.to_owned(),
            }),
            Verdict::NotCompacted { policy } => Some(CheckpointTopicRefused::NotCompacted {
                topic: topic.to_owned(),
                policy: policy.clone(),
                brokers: brokers.to_owned(),
            }),
            _ => None,
        }
    }
}

/// An admin client that never asks the broker to create a topic.
fn admin(
    brokers: &str,
    properties: &[(String, String)],
    timeout: Duration,
) -> Result<Arc<AdminClient<DefaultClientContext>>, String> {
    let mut config = crate::sink::client_config(brokers, properties.iter().map(|(k, v)| (k, v)));
    config
        .set("allow.auto.create.topics", "false")
        .set("socket.timeout.ms", timeout.as_millis().max(10).to_string());
    config
        .create()
        .map(Arc::new)
        .map_err(|e| format!("cannot create a Kafka client: {e}"))
}

/// Asks the cluster about `topic` without creating it: whether it exists,
/// its partitions and its `cleanup.policy`. Each request waits at most
/// `timeout`.
///
/// # Errors
/// No answer, or the cluster refuses to describe the topic: the text says
/// which.
pub async fn look(
    brokers: &str,
    properties: &[(String, String)],
    topic: &str,
    timeout: Duration,
) -> Result<Looked, String> {
    let admin = admin(brokers, properties, timeout)?;
    let client = Arc::clone(&admin);
    let name = topic.to_owned();
    let described = tokio::task::spawn_blocking(move || {
        client
            .inner()
            .fetch_metadata(Some(&name), timeout)
            .map(|md| {
                md.topics()
                    .iter()
                    .find(|t| t.name() == name)
                    .map(|t| (t.error().map(RDKafkaErrorCode::from), t.partitions().len()))
            })
    })
    .await
    .map_err(|e| format!("metadata request task: {e}"))?
    .map_err(|e| format!("no answer to a metadata request within {timeout:?}: {e}"))?;
    let partitions = match described {
        Some((None, partitions)) => partitions,
        Some((Some(RDKafkaErrorCode::UnknownTopicOrPartition), _)) => {
            close(admin).await;
            return Ok(Looked::Missing);
        }
        Some((Some(code), _)) => {
            close(admin).await;
            return Err(format!("the metadata of the topic: {code}"));
        }
        None => {
            close(admin).await;
            return Err("the broker's metadata answer does not list the topic".to_owned());
        }
    };
    let cleanup_policy = cleanup_policy(&admin, topic, timeout).await;
    close(admin).await;
    Ok(Looked::Exists {
        partitions,
        cleanup_policy,
    })
}

async fn cleanup_policy(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    timeout: Duration,
) -> Result<String, String> {
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let resource = [ResourceSpecifier::Topic(topic)];
    let described = tokio::time::timeout(
        timeout + Duration::from_secs(1),
        admin.describe_configs(resource.iter(), &options),
    )
    .await
    .map_err(|_| format!("no answer within {timeout:?}"))?
    .map_err(|e| e.to_string())?;
    for result in described {
        let resource = result.map_err(|code| match code {
            RDKafkaErrorCode::TopicAuthorizationFailed => format!(
                "{code} (the relay's principal needs DESCRIBE_CONFIGS on the topic to read it)"
            ),
            code => code.to_string(),
        })?;
        if matches!(&resource.specifier, OwnedResourceSpecifier::Topic(t) if t == topic) {
            return resource
                .get("cleanup.policy")
                .and_then(|entry| entry.value.clone())
                .ok_or_else(|| "the broker did not say".to_owned());
        }
    }
    Err("the broker did not describe it".to_owned())
}

/// Destroys a client off the async workers (it blocks while librdkafka
/// stops its threads), without waiting for it: the answer is in, and the
/// relay's start need not wait for the client to close.
async fn close(admin: Arc<AdminClient<DefaultClientContext>>) {
    drop(tokio::task::spawn_blocking(move || drop(admin)));
}

/// What [`create`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Created,
    /// It exists (created meanwhile by someone else).
    Existed,
}

/// Creates `topic` as the checkpoint topic: one partition, compacted, the
/// broker's default replication factor.
///
/// # Errors
/// The broker refused (authorization, a policy) or did not answer within
/// `timeout`.
pub async fn create(
    brokers: &str,
    properties: &[(String, String)],
    topic: &str,
    timeout: Duration,
) -> Result<Created, String> {
    let admin = admin(brokers, properties, timeout)?;
    let new_topic =
        NewTopic::new(topic, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
    let options = AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout));
    let created = tokio::time::timeout(
        timeout + Duration::from_secs(1),
        admin.create_topics([&new_topic], &options),
    )
    .await;
    close(admin).await;
    let results = created
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|e| e.to_string())?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(Created::Created),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(Created::Existed),
        Some(Err((_, code))) => Err(code.to_string()),
        None => Err("the broker did not answer for the topic".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(partitions: usize, policy: Result<&str, &str>) -> Looked {
        Looked::Exists {
            partitions,
            cleanup_policy: policy.map(str::to_owned).map_err(str::to_owned),
        }
    }

    #[test]
    fn one_partition_and_compaction_is_ready_and_nothing_else() {
        assert_eq!(judge(&exists(1, Ok("compact"))), Verdict::Ready);
        assert_eq!(judge(&exists(1, Ok(" compact "))), Verdict::Ready);
        assert_eq!(
            judge(&exists(1, Ok("compact,delete"))),
            Verdict::AlsoDeletes {
                policy: "compact,delete".into()
            }
        );
        assert_eq!(
            judge(&exists(1, Ok("delete"))),
            Verdict::NotCompacted {
                policy: "delete".into()
            }
        );
        assert_eq!(judge(&Looked::Missing), Verdict::Missing);
        // Partitions first: whatever its policy, such a topic cannot be read.
        assert_eq!(
            judge(&exists(3, Ok("compact"))),
            Verdict::Partitioned { partitions: 3 }
        );
        assert_eq!(
            judge(&exists(2, Err("refused"))),
            Verdict::Partitioned { partitions: 2 }
        );
        assert_eq!(
            judge(&exists(1, Err("refused"))),
            Verdict::PolicyUnknown {
                why: "refused".into()
            }
        );
    }

    /// `run` refuses a missing or uncompacted topic with the command that
    /// fixes it; it starts on every other verdict (a partitioned topic is
    /// the checkpoint read's refusal).
    #[test]
    fn run_refuses_a_missing_or_uncompacted_topic_naming_the_fix() {
        let missing = CheckpointTopicRefused::of(&Verdict::Missing, "cp", "k1:9092")
            .unwrap()
            .to_string();
        assert!(
            missing.contains("checkpoint topic \"cp\" does not exist")
                && missing.contains("`outbox-relay init --config <this config>`")
                && missing.contains(
                    "kafka-topics.sh --bootstrap-server k1:9092 --create --topic cp --partitions 1 \
                     --config cleanup.policy=compact"
                ),
            "{missing}"
        );
        let uncompacted = CheckpointTopicRefused::of(
            &Verdict::NotCompacted {
                policy: "delete".into(),
            },
            "cp",
            "k1:9092",
        )
        .unwrap()
        .to_string();
        assert!(
            uncompacted
                .contains("checkpoint topic \"cp\" is not compacted (cleanup.policy=delete)")
                && uncompacted.contains(
                    "kafka-configs.sh --bootstrap-server k1:9092 --alter --entity-type topics \
                     --entity-name cp --add-config cleanup.policy=compact"
                ),
            "{uncompacted}"
        );
        for verdict in [
            Verdict::Ready,
            Verdict::AlsoDeletes {
                policy: "compact,delete".into(),
            },
            Verdict::PolicyUnknown { why: "x".into() },
            Verdict::Partitioned { partitions: 2 },
        ] {
            assert_eq!(CheckpointTopicRefused::of(&verdict, "cp", "k"), None);
        }
    }
}
