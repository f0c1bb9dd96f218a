//! Dispatcher configuration: a plain struct, validated once at start.

use crate::error::DispatcherError;

#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Source elements per dynamic-sharding split. 1 matches tf.data for `range`;
    /// larger values trade balance for fewer split requests.
    pub elements_per_split: u64,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig { elements_per_split: 1 }
    }
}

impl DispatcherConfig {
    pub fn validate(&self) -> Result<(), DispatcherError> {
        if self.elements_per_split == 0 {
            return Err(DispatcherError::Config("elements_per_split must be at least 1".into()));
        }
        Ok(())
    }
}
