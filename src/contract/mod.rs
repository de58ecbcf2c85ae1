//! The contract around a completion: schemas, personas, cursors, and what counts as a valid
//! answer. Everything here is pure and runs before anything is sent or after the host answers.

pub mod cursor;
pub mod output;
pub mod persona;
pub mod schema;
