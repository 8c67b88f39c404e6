//! The vocabulary the idempotency layer and the stores share: keys and their scope, request
//! fingerprints (with [`jcs`], the JSON canonicalization behind `fingerprint_body = "json"`),
//! fencing tokens, the records a store keeps, with their byte encoding, and the deliveries an
//! inbox route owes its upstream.
//!
//! It sits below both: the layer decides what a record should say, a store keeps it, and
//! neither needs the other to know what a record is.

mod clock;
mod delivery;
mod delivery_encoding;
mod encoding;
mod fingerprint;
pub(crate) mod jcs;
mod key;
mod record;
mod token;

pub use clock::{now_millis, unix_millis};
pub use delivery::{
    AttemptFailure, BadDeliveryId, Delivery, DeliveryId, InboxQueues, StoredRequest,
};
pub use delivery_encoding::MAX_ERROR_LEN;
pub use encoding::RecordError;
pub use fingerprint::{Fingerprint, FingerprintBody, Part, PartDigests};
pub use key::{
    ClientScope, IdempotencyKey, KeyError, LogId, RouteName, RouteNameError, ScopedKey, MAX_KEY_LEN,
};
pub use record::{CompletedRecord, InFlightRecord, Record, StoredBody};
pub use token::FencingToken;
