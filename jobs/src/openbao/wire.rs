//! The JSON bodies of OpenBao's HTTP API that the client sends and reads,
//! and an answer as it came.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Deserialize)]
pub(super) struct LookupAnswer {
    pub(super) data: Option<LookupData>,
}

#[derive(Deserialize)]
pub(super) struct LookupData {
    #[serde(default)]
    pub(super) ttl: u64,
    #[serde(default)]
    pub(super) renewable: bool,
    #[serde(default)]
    pub(super) explicit_max_ttl: u64,
    #[serde(default)]
    pub(super) creation_time: u64,
    #[serde(default)]
    pub(super) creation_ttl: u64,
}

#[derive(Deserialize)]
pub(super) struct RenewAnswer {
    pub(super) auth: Option<RenewAuth>,
    #[serde(default)]
    pub(super) warnings: Option<Vec<String>>,
}

#[derive(Deserialize)]
pub(super) struct RenewAuth {
    #[serde(default)]
    pub(super) lease_duration: u64,
    #[serde(default)]
    pub(super) renewable: bool,
}

#[derive(Serialize)]
pub(super) struct WriteBody<'a> {
    pub(super) data: WriteData<'a>,
}

#[derive(Serialize)]
pub(super) struct WriteData<'a> {
    pub(super) value: &'a str,
}

#[derive(Deserialize)]
pub(super) struct ReadAnswer {
    pub(super) data: Option<ReadVersion>,
}

#[derive(Deserialize)]
pub(super) struct ReadVersion {
    pub(super) data: Option<HashMap<String, serde_json::Value>>,
}

#[derive(Deserialize)]
pub(super) struct WriteAnswer {
    pub(super) data: Option<WrittenVersion>,
}

#[derive(Deserialize)]
pub(super) struct WrittenVersion {
    pub(super) version: Option<u64>,
}

#[derive(Deserialize)]
pub(super) struct MetadataAnswer {
    pub(super) data: Option<Metadata>,
}

#[derive(Deserialize)]
pub(super) struct Metadata {
    pub(super) current_version: Option<u64>,
    #[serde(default)]
    pub(super) versions: HashMap<String, VersionMetadata>,
}

#[derive(Deserialize)]
pub(super) struct VersionMetadata {
    #[serde(default)]
    pub(super) deletion_time: String,
    #[serde(default)]
    pub(super) destroyed: bool,
}

#[derive(Deserialize)]
pub(super) struct ListAnswer {
    pub(super) data: Option<ListKeys>,
}

#[derive(Deserialize)]
pub(super) struct ListKeys {
    pub(super) keys: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
pub(super) struct ErrorAnswer {
    #[serde(default)]
    pub(super) errors: Vec<String>,
}

/// An answer that came: its status and body.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: Vec<u8>,
    /// How the answer classifies ([`crate::outbound::classify`]).
    pub(super) class: crate::outbound::Class,
}

impl Answer {
    /// OpenBao's `errors` list (empty when the body has none).
    pub(super) fn errors(&self) -> Vec<String> {
        serde_json::from_slice::<ErrorAnswer>(&self.body).unwrap_or_default().errors
    }
}
