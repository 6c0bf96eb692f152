//! Releases rendered with Ruby's ERB and the blobstore (local, S3 on a real moto server, the
//! HTTPS endpoint) against real files and processes.

mod blobstore;
mod render;
mod render_release;
mod render_zookeeper;
