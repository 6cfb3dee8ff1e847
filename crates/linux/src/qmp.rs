//! A minimal QMP client: the greeting, `qmp_capabilities`, one command at a
//! time (events in between skipped), and `query-stats` flattened into
//! `name → value`.

use crate::error::LinuxError;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

fn qmp_error(reason: impl Into<String>) -> LinuxError {
    LinuxError::Qmp {
        reason: reason.into(),
    }
}

impl Qmp {
    /// Connect (QEMU creates the socket as it starts: retry until `wait`)
    /// and leave capabilities negotiation.
    pub(crate) fn connect(path: &Path, wait: Duration) -> Result<Self, LinuxError> {
        let deadline = Instant::now() + wait;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(qmp_error(format!(
                        "cannot connect to {}: {e}",
                        path.display()
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| qmp_error(e.to_string()))?;
        let writer = stream.try_clone().map_err(|e| qmp_error(e.to_string()))?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = qmp.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(qmp_error(format!("no QMP greeting: {greeting}")));
        }
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    fn read_message(&mut self) -> Result<Value, LinuxError> {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .map_err(|e| qmp_error(format!("reading: {e}")))?;
        if n == 0 {
            return Err(qmp_error("QEMU closed the socket"));
        }
        serde_json::from_str(&line).map_err(|e| qmp_error(format!("not JSON ({e}): {line}")))
    }

    /// Run one command; its `return` value.
    pub(crate) fn execute(
        &mut self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<Value, LinuxError> {
        let mut msg = json!({ "execute": command });
        if let Some(args) = arguments {
            msg["arguments"] = args;
        }
        let text = format!("{msg}\n");
        self.writer
            .write_all(text.as_bytes())
            .map_err(|e| qmp_error(format!("writing {command}: {e}")))?;
        loop {
            let reply = self.read_message()?;
            if let Some(ret) = reply.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = reply.get("error") {
                return Err(qmp_error(format!("{command}: {err}")));
            }
            // An asynchronous event: not the answer.
        }
    }

    /// KVM's statistics for the VM and every vCPU.
    pub(crate) fn kvm_stats(&mut self) -> Result<BTreeMap<String, u64>, LinuxError> {
        let mut stats = BTreeMap::new();
        for target in ["vm", "vcpu"] {
            let ret = self.execute(
                "query-stats",
                Some(json!({ "target": target, "providers": [{ "provider": "kvm" }] })),
            )?;
            flatten_stats(target, &ret, &mut stats);
        }
        Ok(stats)
    }
}

/// `query-stats`'s answer as `vm.NAME` / `vcpuN.NAME` → value: one result per
/// VM or per vCPU (in QEMU's order), scalar values only (histograms and
/// booleans left out).
pub(crate) fn flatten_stats(target: &str, answer: &Value, into: &mut BTreeMap<String, u64>) {
    let Some(results) = answer.as_array() else {
        return;
    };
    for (i, result) in results.iter().enumerate() {
        let prefix = if target == "vm" {
            "vm".to_string()
        } else {
            format!("{target}{i}")
        };
        for stat in result
            .get("stats")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(name), Some(value)) = (
                stat.get("name").and_then(Value::as_str),
                stat.get("value").and_then(Value::as_u64),
            ) {
                into.insert(format!("{prefix}.{name}"), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattens_vm_and_vcpu_stats() {
        let vm = json!([{ "provider": "kvm", "stats": [
            { "name": "remote_tlb_flush", "value": 3 },
            { "name": "max_mmu_page_hash_collisions", "value": 0 }
        ]}]);
        let vcpu = json!([
            { "provider": "kvm", "qom-path": "/machine/unattached/device[0]", "stats": [
                { "name": "exits", "value": 120 },
                { "name": "halt_poll_fail_hist", "value": [1, 2, 3] },
                { "name": "guest_mode", "value": false }
            ]},
            { "provider": "kvm", "qom-path": "/machine/unattached/device[1]", "stats": [
                { "name": "exits", "value": 80 }
            ]}
        ]);
        let mut out = BTreeMap::new();
        flatten_stats("vm", &vm, &mut out);
        flatten_stats("vcpu", &vcpu, &mut out);
        let want: BTreeMap<String, u64> = [
            ("vm.remote_tlb_flush", 3),
            ("vm.max_mmu_page_hash_collisions", 0),
            ("vcpu0.exits", 120),
            ("vcpu1.exits", 80),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(out, want);
        flatten_stats("vm", &json!({}), &mut out);
        assert_eq!(out.len(), 4);
    }
}
