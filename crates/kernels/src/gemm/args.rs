//! The knobs on a command line, from their declarations: one flag per knob (`--bm`,
//! `--b-prefetch`, `--no-lds-swizzle`), its help the knob's doc. Only the flags given reach the
//! spec, so one its kernel has no place for is refused with the reason.

use std::marker::PhantomData;

use clap::builder::EnumValueParser;
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches, value_parser};

use super::knobs::KnobValue;
use super::spec::{KernelSpec, Knob, SpecError, Variant};

/// Which knobs a set of flags takes.
pub trait KnobSet: Send + Sync + 'static {
    /// Whether knob `k` has a flag.
    fn takes(k: Knob) -> bool;
}

/// Every knob but the variant.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllKnobs;

impl KnobSet for AllKnobs {
    fn takes(_: Knob) -> bool {
        true
    }
}

/// The flags of the knobs in `S` (never the variant), and the values given.
#[derive(Debug, Clone)]
pub struct KnobArgs<S = AllKnobs> {
    given: Vec<(Knob, KnobValue)>,
    set: PhantomData<fn() -> S>,
}

impl<S: KnobSet> KnobArgs<S> {
    /// The knobs of this set.
    fn knobs() -> impl Iterator<Item = Knob> {
        Knob::ALL
            .iter()
            .copied()
            .filter(|&k| k != Knob::Variant && S::takes(k))
    }

    /// The value given for `k`, if any.
    pub fn given(&self, k: Knob) -> Option<KnobValue> {
        self.given.iter().find(|(g, _)| *g == k).map(|(_, v)| *v)
    }

    /// `spec` with the given knobs set, in the table's order (a switch before the knobs it
    /// makes a place for). A knob the spec has no place for is refused.
    pub fn apply(&self, spec: impl Into<KernelSpec>) -> Result<KernelSpec, SpecError> {
        let mut spec = spec.into();
        for &(k, v) in &self.given {
            k.set(&mut spec, v)?;
        }
        Ok(spec)
    }
}

/// The flag of knob `k`; its type is that of its default.
fn arg(k: Knob) -> Arg {
    // The doc as one paragraph: clap wraps it to the terminal.
    let help = k.doc().split_whitespace().collect::<Vec<_>>().join(" ");
    let arg = Arg::new(k.name()).long(k.flag()).help(help);
    match k.default_value(Variant::Preb) {
        KnobValue::Flag(_) => arg.action(ArgAction::SetTrue),
        KnobValue::Count(_) | KnobValue::Auto(_) => arg.value_parser(value_parser!(u32)),
        KnobValue::Mma(_) => arg.value_parser(EnumValueParser::<tilegen_dsl::MfmaShape>::new()),
        KnobValue::Policy(_) => {
            arg.value_parser(EnumValueParser::<tilegen_dsl::CachePolicy>::new())
        }
        KnobValue::Out(_) => arg.value_parser(EnumValueParser::<super::OutDtype>::new()),
        KnobValue::Variant(_) => arg.value_parser(EnumValueParser::<Variant>::new()),
    }
}

/// The value of knob `k`'s flag, if given.
fn value(m: &ArgMatches, k: Knob) -> Option<KnobValue> {
    let id = k.name();
    match k.default_value(Variant::Preb) {
        // A switch's flag turns it away from its default.
        KnobValue::Flag(default) => m
            .try_get_one::<bool>(id)
            .ok()
            .flatten()
            .filter(|&&on| on)
            .map(|_| KnobValue::Flag(!default)),
        KnobValue::Count(_) => m.try_get_one::<u32>(id).ok()?.map(|&v| KnobValue::Count(v)),
        KnobValue::Auto(_) => m
            .try_get_one::<u32>(id)
            .ok()?
            .map(|&v| KnobValue::Auto(Some(v))),
        KnobValue::Mma(_) => m
            .try_get_one::<tilegen_dsl::MfmaShape>(id)
            .ok()?
            .map(|&v| KnobValue::Mma(v)),
        KnobValue::Policy(_) => m
            .try_get_one::<tilegen_dsl::CachePolicy>(id)
            .ok()?
            .map(|&v| KnobValue::Policy(v)),
        KnobValue::Out(_) => m
            .try_get_one::<super::OutDtype>(id)
            .ok()?
            .map(|&v| KnobValue::Out(v)),
        KnobValue::Variant(_) => m
            .try_get_one::<Variant>(id)
            .ok()?
            .map(|&v| KnobValue::Variant(v)),
    }
}

impl<S: KnobSet> FromArgMatches for KnobArgs<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(KnobArgs {
            given: Self::knobs()
                .filter_map(|k| value(m, k).map(|v| (k, v)))
                .collect(),
            set: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<S: KnobSet> Args for KnobArgs<S> {
    fn augment_args(cmd: Command) -> Command {
        Self::knobs().fold(cmd, |cmd, k| cmd.arg(arg(k)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// A GEMM spec on the command line: `--variant` (preb by default) and every knob's flag; unset
/// knobs keep the variant's defaults.
#[derive(Debug, Clone)]
pub struct SpecArgs {
    variant: Variant,
    knobs: KnobArgs,
}

impl SpecArgs {
    /// The spec the flags describe, or why a flag has no place in it.
    pub fn spec(&self) -> Result<KernelSpec, SpecError> {
        self.knobs.apply(KernelSpec::of_variant(self.variant))
    }
}

impl FromArgMatches for SpecArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(SpecArgs {
            variant: m
                .try_get_one::<Variant>(Knob::Variant.name())
                .ok()
                .flatten()
                .copied()
                .unwrap_or(Variant::Preb),
            knobs: KnobArgs::from_arg_matches(m)?,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for SpecArgs {
    fn augment_args(cmd: Command) -> Command {
        let variant = arg(Knob::Variant).default_value("preb");
        KnobArgs::<AllKnobs>::augment_args(cmd.arg(variant))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        spec: SpecArgs,
    }

    fn spec(args: &[&str]) -> Result<KernelSpec, SpecError> {
        let cli =
            Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).map_err(|e| {
                SpecError::KnobType {
                    knob: "command line",
                    value: e.to_string(),
                }
            })?;
        cli.spec.spec()
    }

    #[test]
    fn flags_reach_the_spec_and_misplaced_ones_are_refused() {
        assert_eq!(spec(&[]).unwrap(), KernelSpec::preb().into());
        let s = spec(&["--bm", "128", "--b-prefetch", "--b-prefetch-depth", "2"]).unwrap();
        assert_eq!(
            s,
            KernelSpec::preb()
                .bm(128)
                .prefetch(Some(crate::Prefetch::new().b_prefetch_depth(2)))
                .into()
        );
        let s = spec(&[
            "--variant",
            "lds",
            "--no-lds-swizzle",
            "--waves-per-eu",
            "2",
        ])
        .unwrap();
        assert_eq!(
            s,
            KernelSpec::lds()
                .lds_swizzle(false)
                .waves_per_eu(Some(2))
                .into()
        );
        assert!(matches!(
            spec(&["--variant", "lds", "--b-prefetch"]),
            Err(SpecError::WrongVariant {
                flag: "b_prefetch",
                ..
            })
        ));
        assert!(matches!(
            spec(&["--deep-prime"]),
            Err(SpecError::NeedsPrefetch { flag: "deep_prime" })
        ));
        assert!(matches!(
            spec(&["--b-prefetch", "--mfma-cluster", "2"]),
            Err(SpecError::Ignored {
                setter: "mfma_cluster",
                ..
            })
        ));
        // Every knob has a flag of its own.
        let cmd = <Cli as clap::CommandFactory>::command();
        for &k in Knob::ALL {
            assert!(
                cmd.get_arguments().any(|a| a.get_long() == Some(k.flag())),
                "{}",
                k.flag()
            );
        }
    }
}
