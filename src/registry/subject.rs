//! Which registry subject a record's value schema lives under: Confluent's
//! subject name strategies, as its serializers' `value.subject.name.strategy`
//! names them, so that a consumer configured the same way finds the same
//! subject.

/// Confluent's value subject name strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SubjectNameStrategy {
    /// `<topic>-value`: one schema (and its evolution) per topic. Confluent's
    /// default.
    #[default]
    TopicName,
    /// `<record name>`: the record's full name (an Avro record's
    /// `namespace.name`, a Protobuf message's full name, a JSON Schema's
    /// `title`), whatever the topic.
    RecordName,
    /// `<topic>-<record name>`: several record types on one topic, each
    /// evolving on its own.
    TopicRecordName,
}

impl SubjectNameStrategy {
    /// The subject for a value on `topic` of the record named `record`.
    /// `None` when the strategy needs a record name and there is none (a
    /// JSON Schema without `title`, say).
    pub fn subject(self, topic: &str, record: Option<&str>) -> Option<String> {
        match (self, record) {
            (SubjectNameStrategy::TopicName, _) => Some(topic_name(topic)),
            (SubjectNameStrategy::RecordName, Some(record)) => Some(record.to_string()),
            (SubjectNameStrategy::TopicRecordName, Some(record)) => {
                Some(topic_record_name(topic, record))
            }
            (_, None) => None,
        }
    }
}

/// TopicNameStrategy: `<topic>-value`.
pub fn topic_name(topic: &str) -> String {
    format!("{topic}-value")
}

/// TopicRecordNameStrategy: `<topic>-<record name>`.
pub fn topic_record_name(topic: &str, record: &str) -> String {
    format!("{topic}-{record}")
}

#[cfg(test)]
mod tests {
    use super::SubjectNameStrategy::*;

    #[test]
    fn subjects_are_named_as_confluents_serializers_name_them() {
        let record = Some("com.acme.OrderPlaced");
        assert_eq!(
            TopicName.subject("orders", record).as_deref(),
            Some("orders-value")
        );
        assert_eq!(
            TopicName.subject("orders", None).as_deref(),
            Some("orders-value")
        );
        assert_eq!(
            RecordName.subject("orders", record).as_deref(),
            Some("com.acme.OrderPlaced")
        );
        assert_eq!(
            TopicRecordName.subject("orders", record).as_deref(),
            Some("orders-com.acme.OrderPlaced")
        );
        assert_eq!(RecordName.subject("orders", None), None);
        assert_eq!(TopicRecordName.subject("orders", None), None);
    }
}
