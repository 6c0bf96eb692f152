//! The agent's side of the message bus (`bosh-protocols.md` §2.1–§2.2): how requests reach
//! the agent's actions and how replies go back. Transports only; what a request does is the
//! [`Handler`]'s business.

pub mod https;

use futures::future::BoxFuture;

use kubosh_transport::agent::protocol::{Reply, Request};

/// Answers requests that arrive on a message bus.
///
/// `request.protocol` is `None` over HTTPS (the agent then applies protocol 0 semantics);
/// `request.reply_to` is where a NATS transport publishes the reply. The handler answers
/// with the reply to send; a transport never adds replies of its own except for requests it
/// cannot parse.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request.
    fn handle(&self, request: Request) -> BoxFuture<'_, Reply>;
}

pub mod nats;
