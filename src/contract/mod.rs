//! The contract around a completion: schemas, personas and cursors. Everything here is pure and
//! runs before anything is sent or after the answer is in.

pub mod cursor;
pub mod held;
pub mod persona;
pub mod schema;
