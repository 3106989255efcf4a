//! Kafka's secured listener (SASL_SSL, SCRAM-SHA-512, ACLs) from
//! `scripts/services`: the relay's client properties for it, and ACLs
//! granted and removed as its admin user.
//!
//! rdkafka 0.39 has no ACL API, so this calls librdkafka's (CreateAcls,
//! DeleteAcls, DescribeAcls) through `rdkafka::bindings`: milliseconds per
//! call, where `scripts/services acls` starts a JVM for each (seconds).
//! Each call waits until the broker's own answer to DescribeAcls shows the
//! change: KRaft applies an ACL on the broker once it replays the record
//! the controller committed, a moment after CreateAcls returns.

use std::ffi::{CStr, CString, c_char};
use std::ptr;

use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::DefaultClientContext;

use super::{DEADLINE, env, wait_until};

/// The SASL_SSL listener's bootstrap address.
pub fn sasl_bootstrap() -> String {
    env("OUTBOX_TEST_KAFKA_SASL_BOOTSTRAP")
}

/// The relay principal's password (a secret no log line may hold).
pub fn relay_password() -> String {
    env("OUTBOX_TEST_KAFKA_SASL_RELAY_PASSWORD")
}

/// The admin's password (likewise).
pub fn admin_password() -> String {
    env("OUTBOX_TEST_KAFKA_SASL_ADMIN_PASSWORD")
}

/// The relay's `[kafka.properties]` for the SASL_SSL listener, without the
/// password (which the relay takes from
/// `OUTBOX_RELAY__KAFKA__PROPERTIES__SASL_PASSWORD`, as docs advise).
pub fn relay_properties_toml() -> String {
    format!(
        "[kafka.properties]\n\"security.protocol\" = \"sasl_ssl\"\n\
         \"sasl.mechanisms\" = \"{}\"\n\"sasl.username\" = \"{}\"\n\"ssl.ca.location\" = \"{}\"\n",
        env("OUTBOX_TEST_KAFKA_SASL_MECHANISM"),
        env("OUTBOX_TEST_KAFKA_SASL_RELAY_USER"),
        env("OUTBOX_TEST_KAFKA_SASL_CA"),
    )
}

/// The relay user's principal.
pub fn relay_principal() -> String {
    format!("User:{}", env("OUTBOX_TEST_KAFKA_SASL_RELAY_USER"))
}

/// An ACL resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    Topic,
    TransactionalId,
}

/// One ALLOW ACL for the relay's principal: an operation on a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub resource: Resource,
    pub name: String,
    pub prefixed: bool,
    /// As kafka-acls.sh spells it: "Write", "Read", "DescribeConfigs".
    pub operation: &'static str,
}

impl Acl {
    pub fn topic(name: &str, operation: &'static str) -> Self {
        Acl {
            resource: Resource::Topic,
            name: name.to_owned(),
            prefixed: false,
            operation,
        }
    }

    pub fn topic_prefix(prefix: &str, operation: &'static str) -> Self {
        Acl {
            prefixed: true,
            ..Acl::topic(prefix, operation)
        }
    }

    pub fn transactional_id(id: &str, operation: &'static str) -> Self {
        Acl {
            resource: Resource::TransactionalId,
            ..Acl::topic(id, operation)
        }
    }

    /// The kafka-acls.sh arguments naming it (`--operation Write --topic t`).
    pub fn grant_args(&self) -> String {
        let pattern = if self.prefixed {
            "--resource-pattern-type prefixed "
        } else {
            ""
        };
        let resource = match self.resource {
            Resource::Topic => "--topic",
            Resource::TransactionalId => "--transactional-id",
        };
        format!(
            "--operation {} {pattern}{resource} {}",
            self.operation, self.name
        )
    }

    fn restype(&self) -> rd::rd_kafka_ResourceType_t {
        match self.resource {
            Resource::Topic => rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
            Resource::TransactionalId => {
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TRANSACTIONAL_ID
            }
        }
    }

    fn pattern(&self) -> rd::rd_kafka_ResourcePatternType_t {
        if self.prefixed {
            rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED
        } else {
            rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_LITERAL
        }
    }

    fn op(&self) -> rd::rd_kafka_AclOperation_t {
        use rd::rd_kafka_AclOperation_t as O;
        match self.operation {
            "Write" => O::RD_KAFKA_ACL_OPERATION_WRITE,
            "Read" => O::RD_KAFKA_ACL_OPERATION_READ,
            "Describe" => O::RD_KAFKA_ACL_OPERATION_DESCRIBE,
            "DescribeConfigs" => O::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
            other => panic!("no ACL operation {other:?} here"),
        }
    }
}

/// An admin client of the SASL_SSL listener, as the admin user.
fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", sasl_bootstrap())
        .set("security.protocol", "sasl_ssl")
        .set("sasl.mechanisms", env("OUTBOX_TEST_KAFKA_SASL_MECHANISM"))
        .set("sasl.username", env("OUTBOX_TEST_KAFKA_SASL_ADMIN_USER"))
        .set("sasl.password", admin_password())
        .set("ssl.ca.location", env("OUTBOX_TEST_KAFKA_SASL_CA"))
        .create()
        .expect("admin client of the SASL_SSL listener")
}

/// Grants `acls` to the relay's principal; returns once the broker shows them.
pub async fn grant(acls: &[Acl]) {
    change(acls.to_vec(), true).await;
}

/// Removes `acls` from the relay's principal; returns once the broker no
/// longer shows them.
pub async fn revoke(acls: &[Acl]) {
    change(acls.to_vec(), false).await;
}

async fn change(acls: Vec<Acl>, add: bool) {
    let principal = relay_principal();
    let (wanted, p) = (acls.clone(), principal.clone());
    tokio::task::spawn_blocking(move || {
        let admin = admin();
        // SAFETY: the handle belongs to `admin`, alive for the whole call.
        unsafe { request(admin.inner().native_ptr(), &wanted, &p, add) }
    })
    .await
    .unwrap();
    for acl in acls {
        let principal = principal.clone();
        let what = format!(
            "the broker to {} {acl:?}",
            if add { "show" } else { "forget" }
        );
        wait_until(&what, DEADLINE, move || {
            let (acl, principal) = (acl.clone(), principal.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    let admin = admin();
                    // SAFETY: as above.
                    unsafe { described(admin.inner().native_ptr(), &acl, &principal) == add }
                })
                .await
                .unwrap()
            }
        })
        .await;
    }
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Waits for the one result event of an admin request on `queue`.
unsafe fn result_event(queue: *mut rd::rd_kafka_queue_t) -> *mut rd::rd_kafka_event_t {
    unsafe {
        let event = rd::rd_kafka_queue_poll(queue, 30_000);
        assert!(!event.is_null(), "no answer to the ACL request within 30 s");
        if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let why = CStr::from_ptr(rd::rd_kafka_event_error_string(event)).to_string_lossy();
            panic!("ACL request failed: {why}");
        }
        event
    }
}

unsafe fn error_text(error: *const rd::rd_kafka_error_t) -> String {
    unsafe {
        CStr::from_ptr(rd::rd_kafka_error_string(error))
            .to_string_lossy()
            .into_owned()
    }
}

/// CreateAcls (`add`) or DeleteAcls of `acls` for `principal`.
unsafe fn request(rk: *mut rd::rd_kafka_t, acls: &[Acl], principal: &str, add: bool) {
    let (principal, host) = (c(principal), c("*"));
    let allow = rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW;
    let mut errstr = [0 as c_char; 512];
    unsafe {
        let queue = rd::rd_kafka_queue_new(rk);
        let mut bindings: Vec<*mut rd::rd_kafka_AclBinding_t> = acls
            .iter()
            .map(|acl| {
                let name = c(&acl.name);
                let new = if add {
                    rd::rd_kafka_AclBinding_new
                } else {
                    rd::rd_kafka_AclBindingFilter_new
                };
                let binding = new(
                    acl.restype(),
                    name.as_ptr(),
                    acl.pattern(),
                    principal.as_ptr(),
                    host.as_ptr(),
                    acl.op(),
                    allow,
                    errstr.as_mut_ptr(),
                    errstr.len(),
                );
                assert!(
                    !binding.is_null(),
                    "{acl:?}: {}",
                    CStr::from_ptr(errstr.as_ptr()).to_string_lossy()
                );
                binding
            })
            .collect();
        let n = bindings.len();
        if add {
            rd::rd_kafka_CreateAcls(rk, bindings.as_mut_ptr(), n, ptr::null(), queue);
        } else {
            rd::rd_kafka_DeleteAcls(rk, bindings.as_mut_ptr(), n, ptr::null(), queue);
        }
        let event = result_event(queue);
        let mut count = 0;
        if add {
            let result = rd::rd_kafka_event_CreateAcls_result(event);
            let results = rd::rd_kafka_CreateAcls_result_acls(result, &mut count);
            for i in 0..count {
                let error = rd::rd_kafka_acl_result_error(*results.add(i));
                assert!(error.is_null(), "CreateAcls: {}", error_text(error));
            }
        } else {
            let result = rd::rd_kafka_event_DeleteAcls_result(event);
            let responses = rd::rd_kafka_DeleteAcls_result_responses(result, &mut count);
            for i in 0..count {
                let error = rd::rd_kafka_DeleteAcls_result_response_error(*responses.add(i));
                assert!(error.is_null(), "DeleteAcls: {}", error_text(error));
            }
        }
        assert_eq!(count, n, "one result per ACL");
        rd::rd_kafka_event_destroy(event);
        rd::rd_kafka_AclBinding_destroy_array(bindings.as_mut_ptr(), n);
        rd::rd_kafka_queue_destroy(queue);
    }
}

/// Whether the broker's DescribeAcls shows `acl` for `principal`.
unsafe fn described(rk: *mut rd::rd_kafka_t, acl: &Acl, principal: &str) -> bool {
    let (name, principal, host) = (c(&acl.name), c(principal), c("*"));
    let allow = rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW;
    let mut errstr = [0 as c_char; 512];
    unsafe {
        let filter = rd::rd_kafka_AclBindingFilter_new(
            acl.restype(),
            name.as_ptr(),
            acl.pattern(),
            principal.as_ptr(),
            host.as_ptr(),
            acl.op(),
            allow,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        assert!(!filter.is_null(), "{acl:?}");
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_DescribeAcls(rk, filter, ptr::null(), queue);
        let event = result_event(queue);
        let result = rd::rd_kafka_event_DescribeAcls_result(event);
        let mut count = 0;
        rd::rd_kafka_DescribeAcls_result_acls(result, &mut count);
        rd::rd_kafka_event_destroy(event);
        rd::rd_kafka_AclBinding_destroy(filter);
        rd::rd_kafka_queue_destroy(queue);
        count > 0
    }
}
