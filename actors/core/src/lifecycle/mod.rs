//! The NodeClaim lifecycle above the API types, the model, scheduling and the ports.

mod object;
