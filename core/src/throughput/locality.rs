//! How much a job slows down when its GPUs are poorly placed.
//!
//! A job on a set with locality score `s` (0..100, see `gangway_topology::placement`) runs at
//! `1 - sensitivity x (1 - s/100)` of its well-placed throughput.

//!
//! Default sensitivities by model family. The literature gives the direction and the reason, not one
//! number per model, so these values are gangway's estimates, to be calibrated against measurements:
//! - Tiresias (Gu et al., NSDI'19, section 3.3): sensitivity follows the skew of tensor sizes; VGG-family
//!   and AlexNet (a few huge fully-connected tensors) slow down markedly when spread over servers,
//!   ResNet and Inception barely. Here: 0.6 for VGG/AlexNet and large language models, 0.15 for
//!   ResNet/Inception-style convnets.
//! - Gandiva (Xiao et al., OSDI'18, section 3): intra-server versus inter-server all-reduce bandwidth
//!   differs by an order of magnitude for communication-heavy models; Transformers and LSTM language
//!   models sit with the sensitive group (0.5).
//! - Jeon et al. (Philly, ATC'19, section 3.1): jobs spread over servers ran slower, which is why the
//!   scheduler waited for locality; with no model name (Philly's trace) we use 0.3.
//! - Recommendation (embedding-heavy, small dense part), CycleGAN and A3C are mostly compute-bound: 0.1.

use crate::placement::Locality;

/// The default sensitivity (0..1) of a job type, from its name.
pub fn default_sensitivity(job_type: &str) -> f64 {
    let name = job_type.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| name.contains(w));
    if has(&["vgg", "alexnet", "gpt", "bert", "llama"]) {
        0.6
    } else if has(&["transformer", "lm (", "lstm", "deepspeech", "translation"])
        || name.starts_with("lm")
    {
        0.5
    } else if has(&["resnet", "inception", "yolo", "cifar", "imagenet"]) {
        0.15
    } else if has(&["recommendation", "ncf", "cyclegan", "a3c"]) {
        0.1
    } else {
        0.3
    }
}

/// Throughput multiplier for a job of `sensitivity` on a set with `locality`.
pub fn locality_factor(sensitivity: f64, locality: Locality) -> f64 {
    (1.0 - sensitivity.clamp(0.0, 1.0) * (1.0 - locality.score() / 100.0)).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_models_lose_more_on_poor_placements() {
        assert!(default_sensitivity("VGG19") > default_sensitivity("ResNet-50 (batch size 64)"));
        assert_eq!(default_sensitivity("LM (batch size 20)"), 0.5);
        assert_eq!(default_sensitivity("philly"), 0.3);
        assert_eq!(locality_factor(0.6, Locality::IDEAL), 1.0);
        assert!((locality_factor(0.6, Locality::new(50.0)) - 0.7).abs() < 1e-12);
        assert_eq!(locality_factor(0.3, Locality::new(0.0)), 0.7);
    }
}
