pub use gangway_core as core;
