//! `appliance restore --from DIR`: the backup checked whole (manifest,
//! checksums, pepper, store verified, mode) before the data dir's files are swapped.

use super::*;

/// `appliance restore --from DIR`. Refuses, changing nothing, unless
/// `DIR` is a complete backup: it exists (it is only read, never created), its
/// `manifest.json` lists the store and the pepper, every listed file is there with the
/// SHA-256 the manifest records, it holds every data-dir file the target has (a backup
/// without `seed.enc` never replaces a live seed), its store passes every `verify`
/// invariant, and a test-mode backup never goes into a live data dir. Also refuses while a
/// server runs. Then the current files are moved aside (`<name>.before-restore-<unix time>`)
/// and the verified copies take their place.
pub(super) fn restore(cfg: &Config, from: &Path) -> anyhow::Result<ExitCode> {
    let manifest = check_backup(from)?;
    if operator::call_socket(&cfg.socket_path(), &Request::ProjectList)
        .map_err(anyhow::Error::msg)?
        .is_some()
    {
        anyhow::bail!(
            "a server is running on {}; stop it before restoring",
            cfg.data_dir.display()
        );
    }
    let listed = |name: &str| manifest.files.iter().any(|f| f == name);
    for name in operator::BACKUP_FILES {
        if cfg.data_dir.join(name).exists() && !listed(name) {
            anyhow::bail!(
                "{} has no {name} but the data dir {} has one; refusing to replace it \
                 (restore this backup into an empty data dir instead)",
                from.display(),
                cfg.data_dir.display()
            );
        }
    }
    // Holding the current store's lock for the whole swap keeps a server from starting on it.
    let current = if cfg.store_path().exists() {
        Some(crate::server::open_store(cfg, std::time::Duration::ZERO)?)
    } else {
        None
    };
    let outcome = Restore {
        cfg,
        from,
        manifest: &manifest,
        current: current.as_ref(),
    }
    .swap();
    if let Some(s) = current {
        close_store(s);
    }
    outcome?;
    outln!(
        "restored {} into {}",
        from.display(),
        cfg.data_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// What `manifest.json` of a backup says.
struct Manifest {
    files: Vec<String>,
    sha256: std::collections::BTreeMap<String, String>,
}

/// Reads and checks a backup directory without writing to it.
fn check_backup(from: &Path) -> anyhow::Result<Manifest> {
    let shown = from.display();
    let meta = std::fs::metadata(from).map_err(|e| {
        anyhow::anyhow!(
            "{shown} is not a backup: {}; nothing was restored",
            crate::config::io_message(&e)
        )
    })?;
    if !meta.is_dir() {
        anyhow::bail!("{shown} is not a backup directory; nothing was restored");
    }
    let text = std::fs::read(from.join("manifest.json")).map_err(|e| {
        anyhow::anyhow!(
            "{shown} is not a complete backup: manifest.json: {}; nothing was restored",
            crate::config::io_message(&e)
        )
    })?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| {
        anyhow::anyhow!("{shown}/manifest.json is not valid JSON ({e}); nothing was restored")
    })?;
    let files: Vec<String> = v["files"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let sha256: std::collections::BTreeMap<String, String> = v["sha256"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    for required in ["appliance.redb", "pepper"] {
        if !files.iter().any(|f| f == required) {
            anyhow::bail!(
                "{shown} is not a complete backup: its manifest lists no {required}; nothing was restored"
            );
        }
    }
    for name in &files {
        let allowed = name == "appliance.redb" || operator::BACKUP_FILES.contains(&name.as_str());
        if !allowed {
            anyhow::bail!(
                "{shown}/manifest.json lists an unexpected file {name:?}; nothing was restored"
            );
        }
        let path = from.join(name);
        if !path.is_file() {
            anyhow::bail!(
                "{shown} is not a complete backup: {name} is missing; nothing was restored"
            );
        }
        if !sha256.contains_key(name) {
            anyhow::bail!(
                "{shown}/manifest.json records no checksum for {name}; nothing was restored"
            );
        }
    }
    Ok(Manifest { files, sha256 })
}

fn sha256_file(path: &Path) -> anyhow::Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path).map_err(|e| {
        anyhow::anyhow!(
            "reading {}: {}",
            path.display(),
            crate::config::io_message(&e)
        )
    })?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

/// A checked backup being restored into `cfg`'s data dir (under the current store's lock
/// when there is one).
struct Restore<'a> {
    cfg: &'a Config,
    from: &'a Path,
    manifest: &'a Manifest,
    current: Option<&'a appliance_storage::Store>,
}

impl Restore<'_> {
    /// Copies the backup into the data dir as `<name>.restoring`, checks the copies, then swaps.
    fn swap(&self) -> anyhow::Result<()> {
        crate::data_dir::prepare(&self.cfg.data_dir)?;
        let staged = |name: &str| staged_path(self.cfg, name);
        let result =
            stage_files(self.from, self.manifest, &staged).and_then(|()| self.check_staged());
        if let Err(e) = result {
            for name in &self.manifest.files {
                let _ = std::fs::remove_file(staged(name));
            }
            return Err(e);
        }
        let stamp = chrono::Utc::now().timestamp();
        for name in std::iter::once("appliance.redb").chain(operator::BACKUP_FILES.iter().copied())
        {
            let target = self.cfg.data_dir.join(name);
            if target.exists() {
                std::fs::rename(
                    &target,
                    self.cfg
                        .data_dir
                        .join(format!("{name}.before-restore-{stamp}")),
                )?;
            }
            if self.manifest.files.iter().any(|f| f == name) {
                std::fs::rename(staged(name), &target)?;
            }
        }
        Ok(())
    }

    /// Checks the staged copies: the pepper parses, the store opens and passes `verify`, the
    /// backup's data key opens the secrets its store holds sealed, and a test-mode backup is
    /// not put in a live data dir.
    fn check_staged(&self) -> anyhow::Result<()> {
        // The pepper the server will load (a wrong one would only show at the next start).
        let pepper = std::fs::read_to_string(staged_path(self.cfg, "pepper"))?;
        crate::auth::Pepper::parse(&pepper).map_err(|e| {
            anyhow::anyhow!(
                "{}/pepper is not a pepper: {e}; nothing was restored",
                self.from.display()
            )
        })?;
        // Verify the copy that will be put in place (the backup itself stays untouched).
        let b = appliance_storage::Store::open(
            &staged_path(self.cfg, "appliance.redb"),
            appliance_storage::StoreOptions::default(),
        )
        .map_err(|e| {
            anyhow::anyhow!(
                "{}/appliance.redb is not a readable store: {e}",
                self.from.display()
            )
        })?;
        // The backup's data key (checksum-equal to its staged copy) must open the secrets
        // its store holds sealed.
        let key = crate::sealing::DataKey::load(self.from);
        let checked = b.read_blocking(|r| {
            Ok::<_, appliance_storage::StoreError>((
                appliance_storage::verify::verify(r)?,
                crate::server::recorded_mode(r)?,
                key.as_ref()
                    .map_err(|e| format!("{}: {e}", crate::sealing::DATA_KEY_FILE))
                    .and_then(|k| {
                        crate::sealing::check_webhook_secrets(r, k.as_ref())?;
                        crate::sealing::check_checkout_tokens(r, k.as_ref())
                    }),
            ))
        });
        close_store(b);
        let (rep, backup_mode, secrets) = checked?;
        if !rep.violations.is_empty() {
            anyhow::bail!(
                "the backup fails verify ({} violations); nothing was restored",
                rep.violations.len()
            );
        }
        if let Err(e) = secrets {
            anyhow::bail!(
                "{} is not a complete backup: {e}; nothing was restored",
                self.from.display()
            );
        }
        // A backup that does not record its mode is live when it carries a seed.
        let backup_live = match backup_mode {
            Some(mode) => mode == "live",
            None => self
                .manifest
                .files
                .iter()
                .any(|f| f == appliance_signer::SEED_FILE),
        };
        let target_mode = match self.current {
            Some(s) => s.read_blocking(crate::server::recorded_mode)?,
            None => None,
        };
        let target_live = target_mode.as_deref() == Some("live")
            || self.cfg.data_dir.join(appliance_signer::SEED_FILE).exists();
        if target_live && !backup_live {
            anyhow::bail!(
                "{} is a test-mode backup and {} is a live data dir; refusing to restore it there",
                self.from.display(),
                self.cfg.data_dir.display()
            );
        }
        Ok(())
    }
}

/// Where file `name` of a backup is staged in the data dir.
fn staged_path(cfg: &Config, name: &str) -> std::path::PathBuf {
    cfg.data_dir.join(format!("{name}.restoring"))
}

/// Copies each file of the backup to its staged path (owner-only), and checks the copy
/// against the manifest's checksum.
fn stage_files(
    from: &Path,
    manifest: &Manifest,
    staged: &dyn Fn(&str) -> std::path::PathBuf,
) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    for name in &manifest.files {
        let to = staged(name);
        let _ = std::fs::remove_file(&to);
        let mut src = std::fs::File::open(from.join(name))?;
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&to)
            .map_err(|e| {
                anyhow::anyhow!(
                    "writing {}: {}",
                    to.display(),
                    crate::config::io_message(&e)
                )
            })?;
        std::io::copy(&mut src, &mut dst)?;
        dst.sync_all()?;
        drop(dst);
        if manifest.sha256.get(name) != Some(&sha256_file(&to)?) {
            anyhow::bail!(
                "{}/{name} does not match the checksum in its manifest; nothing was restored",
                from.display()
            );
        }
    }
    Ok(())
}
