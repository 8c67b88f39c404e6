//! Inbox routes (SPEC section 11): the delivery side. The request side (acknowledge, record and
//! queue in one store step) is the idempotency layer's; here a worker per inbox route claims
//! due deliveries from the store and sends them to the route's upstream until they are
//! delivered or dead.

mod policy;

pub use policy::DeliveryPolicy;
