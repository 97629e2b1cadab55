//! The NodeClaim lifecycle: the pure state machine its actor runs ([`nodeclaim`]: `decide`
//! from inputs to commands, with the journal's fold as the only way its recorded state
//! changes), and the NodeClaim object as the lifecycle writes it from the round's plan and the
//! launched instance; a NodePool's count of its NodeClaims against its limits
//! ([`nodepool`]); and the status the controller reports on NodePools and EC2NodeClasses
//! ([`status`]).

pub mod nodeclaim;
pub mod nodepool;
mod object;
pub mod status;
#[cfg(test)]
mod tests;
