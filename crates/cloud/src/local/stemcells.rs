//! Stemcells: the image file, kept in the state directory.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::store::{Kind, now_rfc3339};
use super::{Args, Failure, Local};

/// The record of a stemcell (`stemcells/<cid>/meta.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StemcellRecord {
    pub cid: String,
    /// The path the image was uploaded from.
    pub source: String,
    pub cloud_properties: Map<String, Value>,
    pub created_at: String,
    /// The `context.request_id` of the `create_stemcell` call that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Local {
    /// `create_stemcell(image_path, cloud_properties)`: hard-links (or, across file systems,
    /// copies) the image to `stemcells/<cid>/image`. The copy happens outside the lock.
    pub fn create_stemcell(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let image_path = args.string(0, "image_path")?;
        let cloud_properties = args.object(1, "cloud_properties")?;
        let source = std::path::Path::new(image_path);
        if !source.is_file() {
            return Err(Failure::cloud(format!(
                "Stemcell image '{image_path}' is not a readable file"
            )));
        }
        let (cid, staged) = self.store.staging(Kind::Stemcell)?;
        let built = (|| -> std::io::Result<()> {
            let image = staged.join("image");
            if std::fs::hard_link(source, &image).is_err() {
                std::fs::copy(source, &image)?;
            }
            super::store::write_json(
                &staged.join("meta.json"),
                &StemcellRecord {
                    cid: cid.clone(),
                    source: image_path.to_string(),
                    cloud_properties,
                    created_at: now_rfc3339(),
                    request_id: Some(self.request_id.clone()).filter(|id| !id.is_empty()),
                },
            )
        })();
        let committed = built.and_then(|()| {
            let _lock = self.store.lock()?;
            self.store.commit(Kind::Stemcell, &cid, &staged)
        });
        if let Err(e) = committed {
            let _ = super::store::remove_tree(&staged);
            return Err(e.into());
        }
        Ok(Value::String(cid))
    }

    /// `kubosh_find_stemcell(request_id)`: the stemcell `create_stemcell` made for that
    /// request id, or null.
    pub fn find_stemcell(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let request_id = args.string(0, "request_id")?;
        let _lock = self.store.lock_shared()?;
        Ok(self
            .store
            .list::<StemcellRecord>(Kind::Stemcell)?
            .into_iter()
            .find(|(_, s)| s.request_id.as_deref() == Some(request_id))
            .map_or(Value::Null, |(cid, _)| Value::String(cid)))
    }

    /// `delete_stemcell(stemcell_cid)`: removes it; an unknown stemcell is not an error (as
    /// IaaS CPIs treat an image that is already gone).
    pub fn delete_stemcell(&self, args: &Args<'_>) -> Result<Value, Failure> {
        let cid = args.string(0, "stemcell_cid")?;
        let _lock = self.store.lock()?;
        if self
            .store
            .read::<StemcellRecord>(Kind::Stemcell, cid)?
            .is_some()
        {
            self.store.remove(Kind::Stemcell, cid)?;
        } else {
            eprintln!("kubosh cpi: stemcell '{cid}' not found, nothing to delete");
        }
        Ok(Value::Null)
    }
}
