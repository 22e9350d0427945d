//! The policies gangway can build, by name: the built-in ones and a user's, entered through one
//! public call ([`Registry::register`]).
//!
//! A [`PolicyEntry`] is a name, its aliases, a one-line summary, typed knobs with their ranges
//! ([`Knob`]), what the policy needs from the world it runs in ([`Needs`]: a goodput model, resource
//! profiles, an LP solver), and a factory. Every built-in policy registers itself through
//! [`Registry::register`] exactly as a platform team's own does, so a user's policy is listed, takes
//! knobs from a spec string (`mine:k=2`) or from code ([`PolicySpec`]), and runs in the simulator, in
//! comparisons and in the live control plane with no difference from `tiresias` or `sia`.
//!
//! Building a policy where something it needs is missing is an error that names the policy and what
//! it lacks ([`BuildError::Unmet`]), never a silent fallback.
//!
//! ```
//! use gangway_core::policy::{Capabilities, Grant, Knob, KnobRange, Policy, PolicyConfig, PolicyEntry,
//!     Registry, RoundInput};
//!
//! /// Gives each waiting job what it asks, smallest gangs first, while GPUs last.
//! struct SmallestFirst { most: u32 }
//!
//! impl Policy for SmallestFirst {
//!     fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
//!         let mut jobs: Vec<_> = input.jobs.iter().filter(|v| v.job.gpus <= self.most).collect();
//!         jobs.sort_by_key(|v| (v.job.gpus, v.id()));
//!         let mut left = input.capacity.to_vec();
//!         let mut grants = Vec::new();
//!         for view in jobs {
//!             if let Some(t) = (0..left.len()).find(|&t| left[t] >= view.job.gpus && view.rates[t] > 0.0) {
//!                 left[t] -= view.job.gpus;
//!                 grants.push(Grant::new(view.id(), gangway_core::cluster::GpuTypeId(t as u16), view.job.gpus));
//!             }
//!         }
//!         grants
//!     }
//! }
//!
//! let mut registry = Registry::with_builtins();
//! registry
//!     .register(
//!         PolicyEntry::new("smallest_first", |config: &PolicyConfig| {
//!             Box::new(SmallestFirst { most: config.knob("most") as u32 })
//!         })
//!         .summary("smallest gangs first")
//!         .knob(Knob { name: "most", default: 8.0, range: KnobRange::Between(1.0, 1024.0), help: "largest gang it runs" }),
//!     )
//!     .unwrap();
//! let policy = registry.build("smallest_first:most=4", &PolicyConfig::default(), &Capabilities::ALL);
//! assert!(policy.is_ok());
//! // A name is registered once.
//! assert!(registry.register(PolicyEntry::new("fifo", |_: &PolicyConfig| unreachable!())).is_err());
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::{Knob, KnobValues, Policy, PolicyConfig};
use crate::throughput::ThroughputModel;

/// What a policy needs from the world it runs in, beyond jobs and GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// A goodput model (Pollux's and Sia's): each job's throughput and statistical efficiency at every
    /// size and batch.
    pub goodput: bool,
    /// A resource model (Synergy's profiles): how each job's speed follows its CPUs and memory.
    pub resources: bool,
    /// A linear-program solver (HiGHS, or the pure-Rust fallback), built in.
    pub lp_solver: bool,
}

impl Needs {
    /// Nothing beyond jobs and GPUs.
    pub const NOTHING: Needs = Needs {
        goodput: false,
        resources: false,
        lp_solver: false,
    };
    /// A goodput model.
    pub const GOODPUT: Needs = Needs {
        goodput: true,
        ..Needs::NOTHING
    };
    /// A resource model.
    pub const RESOURCES: Needs = Needs {
        resources: true,
        ..Needs::NOTHING
    };
    /// An LP solver.
    pub const LP_SOLVER: Needs = Needs {
        lp_solver: true,
        ..Needs::NOTHING
    };

    /// Both sets of needs.
    pub const fn and(self, other: Needs) -> Needs {
        Needs {
            goodput: self.goodput || other.goodput,
            resources: self.resources || other.resources,
            lp_solver: self.lp_solver || other.lp_solver,
        }
    }

    /// What of these `has` lacks.
    pub fn unmet(self, has: &Capabilities) -> Needs {
        Needs {
            goodput: self.goodput && !has.goodput,
            resources: self.resources && !has.resources,
            lp_solver: self.lp_solver && !has.lp_solver,
        }
    }

    /// Whether it needs nothing.
    pub fn is_empty(self) -> bool {
        self == Needs::NOTHING
    }
}

impl std::ops::BitOr for Needs {
    type Output = Needs;
    fn bitor(self, other: Needs) -> Needs {
        self.and(other)
    }
}

impl fmt::Display for Needs {
    /// Each need, as a person would ask for it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = Vec::new();
        if self.goodput {
            said.push(
                "a goodput model (a Pollux or Sia workload with --profiles, or serve's \
                 --goodput-profiles)",
            );
        }
        if self.resources {
            said.push("resource profiles (Synergy's synergy_model_profiles.json, --profiles)");
        }
        if self.lp_solver {
            said.push("an LP solver (build gangway with the `lp` or `lp-pure` feature)");
        }
        if said.is_empty() {
            return f.write_str("nothing");
        }
        f.write_str(&said.join(" and "))
    }
}

/// What the world a policy is built for offers (see [`Needs`]). The default offers nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// The throughput model has a goodput model.
    pub goodput: bool,
    /// The throughput model has a resource model.
    pub resources: bool,
    /// An LP solver is built in.
    pub lp_solver: bool,
}

impl Capabilities {
    /// Everything: for tools and tests that know what they build (a policy built so still checks at
    /// its first round, loudly).
    pub const ALL: Capabilities = Capabilities {
        goodput: true,
        resources: true,
        lp_solver: true,
    };

    /// What `model` offers, and whether an LP solver is built in.
    pub fn of(model: &dyn ThroughputModel) -> Capabilities {
        Capabilities {
            goodput: model.elastic().is_some(),
            resources: model.resources().is_some(),
            lp_solver: crate::solver::available().is_some(),
        }
    }
}

/// Builds a policy from its configuration (its knobs resolved).
pub type Factory = Arc<dyn Fn(&PolicyConfig) -> Box<dyn Policy> + Send + Sync>;

/// One policy the registry knows (see the module's doc).
#[derive(Clone)]
pub struct PolicyEntry {
    name: String,
    aliases: Vec<String>,
    summary: String,
    knobs: Vec<Knob>,
    needs: Needs,
    factory: Factory,
}

impl fmt::Debug for PolicyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyEntry")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("needs", &self.needs)
            .finish_non_exhaustive()
    }
}

impl PolicyEntry {
    /// A policy called `name`, made by `factory` from its configuration.
    pub fn new(
        name: impl Into<String>,
        factory: impl Fn(&PolicyConfig) -> Box<dyn Policy> + Send + Sync + 'static,
    ) -> Self {
        PolicyEntry {
            name: name.into(),
            aliases: Vec::new(),
            summary: String::new(),
            knobs: Vec::new(),
            needs: Needs::NOTHING,
            factory: Arc::new(factory),
        }
    }

    /// Another name it answers to.
    pub fn alias(mut self, alias: impl Into<String>) -> Self {
        self.aliases.push(alias.into());
        self
    }

    /// Its one-line summary, for listings.
    pub fn summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = summary.into();
        self
    }

    /// A knob it reads from its configuration ([`PolicyConfig::knob`]).
    pub fn knob(mut self, knob: Knob) -> Self {
        self.knobs.push(knob);
        self
    }

    /// What it needs to run (checked when it is built).
    pub fn needs(mut self, needs: Needs) -> Self {
        self.needs = self.needs | needs;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its other names.
    pub fn aliases(&self) -> &[String] {
        &self.aliases
    }

    /// Its one-line summary.
    pub fn summary_line(&self) -> &str {
        &self.summary
    }

    /// Its knobs.
    pub fn knobs(&self) -> &[Knob] {
        &self.knobs
    }

    /// What it needs.
    pub fn requirements(&self) -> Needs {
        self.needs
    }

    /// Whether it answers to `name`.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }
}

/// A policy spec built in code, the same as a spec string: `PolicySpec::new("themis").knob("f", 0.5)`
/// is `themis:f=0.5`.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    name: String,
    knobs: Vec<(String, f64)>,
    mechanism: Option<String>,
}

impl PolicySpec {
    /// The policy `name` with its default knobs.
    pub fn new(name: impl Into<String>) -> Self {
        PolicySpec {
            name: name.into(),
            knobs: Vec::new(),
            mechanism: None,
        }
    }

    /// Sets a knob.
    pub fn knob(mut self, name: impl Into<String>, value: f64) -> Self {
        self.knobs.push((name.into(), value));
        self
    }

    /// Sizes CPUs and memory with one of Synergy's mechanisms (`tune`, `opt`, `proportional`).
    pub fn mechanism(mut self, mechanism: impl Into<String>) -> Self {
        self.mechanism = Some(mechanism.into());
        self
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        for (k, v) in &self.knobs {
            write!(f, ":{k}={v}")?;
        }
        if let Some(m) = &self.mechanism {
            write!(f, "+{m}")?;
        }
        Ok(())
    }
}

/// Why a policy could not be registered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistryError {
    /// The name (or alias) is another policy's already.
    #[error("`{name}` is already registered (as {owner})")]
    Duplicate {
        /// The name given twice.
        name: String,
        /// The policy that has it.
        owner: String,
    },
    /// A name that a spec could not name (empty, or with `:`, `=`, `+`, `,` or whitespace).
    #[error("`{0}` cannot be a policy's name: use letters, digits, `_` and `-`")]
    BadName(String),
    /// A knob's default is outside its own range.
    #[error(
        "policy `{policy}`: knob `{knob}`: the default {default} is outside its range ({range})"
    )]
    BadKnob {
        /// The policy.
        policy: String,
        /// The knob.
        knob: &'static str,
        /// Its default.
        default: f64,
        /// Its range, as said.
        range: String,
    },
}

/// Why a policy could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// No policy has the name.
    #[error("unknown policy `{name}`; known policies: {known}")]
    UnknownPolicy {
        /// The name asked for.
        name: String,
        /// The names known, with their aliases.
        known: String,
    },
    /// A knob is not one the policy has, or its value is refused.
    #[error("policy `{spec}`: knob `{knob}`: {why}")]
    Knob {
        /// The spec.
        spec: String,
        /// The knob as given.
        knob: String,
        /// What is wrong.
        why: String,
    },
    /// An unknown `+MECHANISM`.
    #[error("policy `{spec}`: {why}")]
    Mechanism {
        /// The spec.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// What it needs is missing where it would run.
    #[error("policy `{policy}` needs {missing}, which this run lacks")]
    Unmet {
        /// The policy (its spec).
        policy: String,
        /// What is missing.
        missing: Needs,
    },
}

/// A spec resolved against a registry: its entry, every knob's value, and its mechanism.
#[derive(Debug)]
pub struct Resolved<'r> {
    /// The policy's entry.
    pub entry: &'r PolicyEntry,
    /// Every declared knob with its value (given, or the default).
    pub knobs: KnobValues,
    /// The `+MECHANISM` it ends in, if any.
    pub mechanism: Option<super::resourced::Mechanism>,
}

impl Resolved<'_> {
    /// What the policy needs, its mechanism's needs included.
    pub fn needs(&self) -> Needs {
        self.entry.needs | self.mechanism.map_or(Needs::NOTHING, |m| m.needs())
    }
}

/// The policies gangway can build, by name (see the module's doc).
#[derive(Clone, Debug, Default)]
pub struct Registry {
    entries: Vec<PolicyEntry>,
    /// Every name and alias, to its entry.
    names: BTreeMap<String, usize>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// A registry of every built-in policy, each entered through [`Registry::register`].
    pub fn with_builtins() -> Self {
        let mut registry = Registry::new();
        super::register_builtins(&mut registry)
            .expect("the built-in policies have distinct, well-formed names and knobs");
        registry
    }

    /// Enters a policy. Its name and aliases must be new to the registry (as the Kubernetes scheduler
    /// framework's registry refuses a plugin name twice), and each knob's default within its range.
    pub fn register(&mut self, entry: PolicyEntry) -> Result<&mut Self, RegistryError> {
        for name in std::iter::once(&entry.name).chain(&entry.aliases) {
            let spec_safe = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
            if !spec_safe {
                return Err(RegistryError::BadName(name.clone()));
            }
            if let Some(&owner) = self.names.get(name) {
                return Err(RegistryError::Duplicate {
                    name: name.clone(),
                    owner: self.entries[owner].name.clone(),
                });
            }
        }
        let mut own = entry.aliases.clone();
        own.push(entry.name.clone());
        own.sort();
        if let Some(twice) = own.windows(2).find(|w| w[0] == w[1]) {
            return Err(RegistryError::Duplicate {
                name: twice[0].clone(),
                owner: entry.name.clone(),
            });
        }
        if let Some(k) = entry.knobs.iter().find(|k| !k.range.contains(k.default)) {
            return Err(RegistryError::BadKnob {
                policy: entry.name.clone(),
                knob: k.name,
                default: k.default,
                range: k.range.to_string(),
            });
        }
        let index = self.entries.len();
        for name in std::iter::once(&entry.name).chain(&entry.aliases) {
            self.names.insert(name.clone(), index);
        }
        self.entries.push(entry);
        Ok(self)
    }

    /// Every policy, in the order they were registered.
    pub fn entries(&self) -> impl Iterator<Item = &PolicyEntry> {
        self.entries.iter()
    }

    /// The policy `name` (or an alias) names.
    pub fn get(&self, name: &str) -> Option<&PolicyEntry> {
        self.names.get(name).map(|&i| &self.entries[i])
    }

    /// Resolves a spec (`name:knob=value:...+MECHANISM`): its entry, every knob's value (given, or the
    /// default, each range-checked and given once), and its mechanism.
    pub fn resolve(&self, spec: &str) -> Result<Resolved<'_>, BuildError> {
        let (body, mechanism) =
            super::resourced::split(spec).map_err(|why| BuildError::Mechanism {
                spec: spec.to_owned(),
                why,
            })?;
        let mut parts = body.split(':');
        let name = parts.next().unwrap_or_default();
        let entry = self.get(name).ok_or_else(|| BuildError::UnknownPolicy {
            name: name.to_owned(),
            known: self.known(),
        })?;
        let mut knobs: KnobValues = entry.knobs.iter().map(|k| (k.name, k.default)).collect();
        let mut given: Vec<&str> = Vec::new();
        for part in parts {
            let bad = |why: String| BuildError::Knob {
                spec: body.to_owned(),
                knob: part.to_owned(),
                why,
            };
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| bad("expected knob=value".into()))?;
            let Some(declared) = entry.knobs.iter().find(|k| k.name == key) else {
                let known: Vec<&str> = entry.knobs.iter().map(|k| k.name).collect();
                return Err(bad(match known.as_slice() {
                    [] => format!("{} has no knobs", entry.name),
                    known => format!("unknown knob; {} has {}", entry.name, known.join(", ")),
                }));
            };
            if given.contains(&key) {
                return Err(bad(format!("`{key}` is given twice")));
            }
            given.push(key);
            let number = value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| bad(format!("`{value}` is not a number")))?;
            if !declared.range.contains(number) {
                return Err(bad(format!("{value} is out of range ({})", declared.range)));
            }
            if let Some(slot) = knobs.iter_mut().find(|(k, _)| *k == key) {
                slot.1 = number;
            }
        }
        Ok(Resolved {
            entry,
            knobs,
            mechanism,
        })
    }

    /// Whether the policy a spec names can be built where `has` holds: the spec resolves, and nothing
    /// it needs is missing.
    pub fn check(&self, spec: &str, has: &Capabilities) -> Result<(), BuildError> {
        let resolved = self.resolve(spec)?;
        let missing = resolved.needs().unmet(has);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(BuildError::Unmet {
                policy: spec.to_owned(),
                missing,
            })
        }
    }

    /// Builds the policy a spec names, where `has` holds (see [`Registry::check`]); `config` gives the
    /// seed and the other settings, and the spec its knobs.
    pub fn build(
        &self,
        spec: &str,
        config: &PolicyConfig,
        has: &Capabilities,
    ) -> Result<Box<dyn Policy>, BuildError> {
        self.check(spec, has)?;
        let resolved = self.resolve(spec)?;
        let config = PolicyConfig {
            knobs: resolved.knobs,
            capabilities: *has,
            ..config.clone()
        };
        let policy = (resolved.entry.factory)(&config);
        Ok(match resolved.mechanism {
            Some(mechanism) => Box::new(super::resourced::Resourced::new(policy, mechanism)),
            None => policy,
        })
    }

    /// Every name, with its aliases, for messages.
    fn known(&self) -> String {
        self.entries
            .iter()
            .map(|p| match p.aliases.as_slice() {
                [] => p.name.clone(),
                aliases => format!("{} (alias {})", p.name, aliases.join(", ")),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The registry of the built-in policies, made once.
pub fn builtin() -> &'static Registry {
    static BUILTIN: OnceLock<Registry> = OnceLock::new();
    BUILTIN.get_or_init(Registry::with_builtins)
}
