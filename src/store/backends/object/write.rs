//! Writes: single PUTs and multipart uploads, conditional on a version when asked, deletes
//! and renames.

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    ObjectStore, ObjectStoreExt, PutOptions, PutPayload, UpdateVersion, WriteMultipart,
};

use crate::store::Spill;
use crate::store::WriteStore;
use crate::store::{PutMode, StoreError, StoreResult};

use super::ObjectStoreBackend;

/// Objects up to this size are written with one PUT; larger ones with a multipart upload.
pub const MULTIPART_THRESHOLD: usize = 8 << 20;

/// Part size of multipart uploads.
pub(super) const PART_SIZE: usize = 8 << 20;

impl ObjectStoreBackend {
    pub(super) fn check_writable(&self) -> StoreResult<()> {
        if self.read_only {
            Err(StoreError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// An unconditional put of a large object, in parts.
    pub(super) async fn put_multipart(
        &self,
        key: &str,
        path: &Path,
        data: Bytes,
    ) -> StoreResult<()> {
        let upload = self.store.put_multipart(path).await.map_err(|e| self.err(key, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut off = 0;
        while off < data.len() {
            if let Err(e) = w.wait_for_capacity(4).await {
                return Err(self.err(key, e));
            }
            let end = (off + PART_SIZE).min(data.len());
            w.put(data.slice(off..end));
            off = end;
        }
        w.finish().await.map_err(|e| self.err(key, e))?;
        Ok(())
    }

    /// An unconditional put of a large spilled file, in parts read from it one at a time:
    /// at most a few parts in memory (those being uploaded), whatever the size.
    pub(super) async fn put_multipart_file(
        &self,
        key: &str,
        path: &Path,
        file: Spill,
        len: u64,
    ) -> StoreResult<()> {
        let upload = self.store.put_multipart(path).await.map_err(|e| self.err(key, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut off = 0u64;
        while off < len {
            if let Err(e) = w.wait_for_capacity(2).await {
                return Err(self.err(key, e));
            }
            let n = (PART_SIZE as u64).min(len - off);
            let part = match crate::store::read_file_at(key, file.clone(), off, n).await {
                Ok(p) => p,
                Err(e) => {
                    let _ = w.abort().await;
                    return Err(e);
                }
            };
            w.put(part);
            off += n;
        }
        w.finish().await.map_err(|e| self.err(key, e))?;
        Ok(())
    }
}

#[async_trait]
impl WriteStore for ObjectStoreBackend {
    /// Conditional puts are one PUT with `If-None-Match: *` (create) or `If-Match: <etag>`
    /// (update), whatever the size: the condition of a multipart upload is not carried by
    /// object_store, and a single PUT takes objects up to 5 GiB on S3.
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.check_writable()?;
        if key.is_empty() {
            return Err(StoreError::IsADirectory(String::new()));
        }
        let path = self.path(key)?;
        self.shapes.forget(key);
        let mode = match mode {
            PutMode::Overwrite if data.len() > MULTIPART_THRESHOLD => {
                return self.put_multipart(key, &path, data).await;
            }
            PutMode::Overwrite => object_store::PutMode::Overwrite,
            PutMode::Create => object_store::PutMode::Create,
            // Our version tag is the ETag the store gave (see `to_meta`). GCS conditions on the
            // object's generation instead: a HEAD finds the generation of the version read (if
            // it is still current), and the PUT is then conditional on that generation.
            PutMode::Update(v) => {
                let version = if self.update_by_generation {
                    match self.store.head(&path).await {
                        Ok(m) if m.e_tag.as_deref() == Some(v.as_str()) => m.version,
                        Ok(_) | Err(object_store::Error::NotFound { .. }) => {
                            return Err(StoreError::Conflict(key.to_string()));
                        }
                        Err(e) => return Err(self.err(key, e)),
                    }
                } else {
                    None
                };
                object_store::PutMode::Update(UpdateVersion { e_tag: Some(v), version })
            }
        };
        let update = matches!(mode, object_store::PutMode::Update(_));
        let opts = PutOptions { mode, ..Default::default() };
        match self.store.put_opts(&path, PutPayload::from_bytes(data), opts).await {
            Ok(_) => Ok(()),
            // If-Match of a key that is gone: S3 and moto answer 404, s3s-fs 412. Either way
            // the version read is no longer there: a conflict, which the writer retries.
            Err(object_store::Error::NotFound { .. }) if update => {
                Err(StoreError::Conflict(key.to_string()))
            }
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Large unconditional puts stream from the file; the rest (small, or conditional: one
    /// PUT) are read into memory and go through `put_opts`.
    async fn put_file(&self, key: &str, file: Spill, len: u64, mode: PutMode) -> StoreResult<()> {
        if mode == PutMode::Overwrite && len > MULTIPART_THRESHOLD as u64 && !key.is_empty() {
            self.check_writable()?;
            let path = self.path(key)?;
            self.shapes.forget(key);
            return self.put_multipart_file(key, &path, file, len).await;
        }
        let data = crate::store::read_file_at(key, file, 0, len).await?;
        self.put_opts(key, data, mode).await
    }

    /// S3 has no conditional DELETE that every server honours: the version is checked with a
    /// HEAD just before the DELETE. A write by another daemon landing between the two (one
    /// round trip) is deleted with the object; docs/SEMANTICS.md says so.
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        self.check_writable()?;
        let path = self.path(key)?;
        self.shapes.forget(key);
        match self.head_opt(key).await? {
            None => Err(StoreError::NotFound(key.to_string())),
            Some(m) if m.version != version => Err(StoreError::Conflict(key.to_string())),
            Some(_) => self.store.delete(&path).await.map_err(|e| self.err(key, e)),
        }
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.check_writable()?;
        let path = self.path(key)?;
        // S3 answers DELETE of a missing key with success; the trait wants NotFound.
        if self.head_opt(key).await?.is_none() {
            return Err(StoreError::NotFound(key.to_string()));
        }
        self.shapes.forget(key);
        self.store.delete(&path).await.map_err(|e| self.err(key, e))
    }

    /// Copy, then delete the source.
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.check_writable()?;
        let (pf, pt) = (self.path(from)?, self.path(to)?);
        self.shapes.forget(from);
        self.shapes.forget(to);
        self.store.copy(&pf, &pt).await.map_err(|e| self.err(from, e))?;
        self.store.delete(&pf).await.map_err(|e| self.err(from, e))
    }
}
