//! A scheduling pass whose policy panicked.

use std::any::Any;
use std::fmt;

/// A policy panicked while it allocated: nothing of that pass was applied (every run kept its
/// GPUs, and what the pass would have seen is the next pass's to see). Returned by
/// [`Engine::try_schedule`](super::Engine::try_schedule).
pub struct PolicyPanic {
    message: String,
    payload: Box<dyn Any + Send>,
}

impl PolicyPanic {
    /// What `catch_unwind` caught, with its message when it has one (`panic!`'s string).
    pub(super) fn from_payload(payload: Box<dyn Any + Send>) -> Self {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        PolicyPanic { message, payload }
    }

    /// The panic's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Goes on panicking with the original payload (what a caller that does not contain it does).
    pub fn resume(self) -> ! {
        std::panic::resume_unwind(self.payload)
    }
}

impl fmt::Debug for PolicyPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyPanic")
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for PolicyPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the policy panicked: {}", self.message)
    }
}

impl std::error::Error for PolicyPanic {}
