//! The GEMM's knobs, each declared once in [`knobs!`]'s table (`spec.rs`). From an entry come:
//! the field of the typed spec that holds it (so a knob lives only where its kernel uses it), its
//! builder setter, its command-line flag ([`SpecArgs`](crate::gemm::SpecArgs)), its template
//! axis (name, default and the rule its values follow), its piece of the kernel name and its
//! field of the stored form ([`SpecValues`](crate::SpecValues)), which is what cache keys hash.
//!
//! A knob's scope says where it lives: every spec ([`Common`](crate::gemm::Common)), the
//! preshuffled-B kernel ([`PrebKnobs`](crate::gemm::PrebKnobs)), its prefetching pipeline
//! ([`Prefetch`](crate::gemm::Prefetch)) or the pipeline's per-cluster schedule
//! ([`ClusterSched`](crate::gemm::ClusterSched)). Four knobs are the spec's structure rather than
//! fields of a scope: the variant, `wm` (which follows `bm` unless set) and the two switches that
//! make a scope present (`b_prefetch`, `cluster_drain_sched`).

use std::fmt;

use serde::Serialize;
use serde::de::{DeserializeOwned, IntoDeserializer};

use super::spec::{Knob, OutDtype, Variant};
use tilegen_dsl::{CachePolicy, MfmaShape};

/// A knob's value, whatever its type: what command lines, template axes and the stored form
/// carry for any knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KnobValue {
    /// The kernel family.
    Variant(Variant),
    /// A size or a count.
    Count(u32),
    /// A switch.
    Flag(bool),
    /// An optional count (`None`: the compiler chooses).
    Auto(Option<u32>),
    /// An MFMA shape.
    Mma(MfmaShape),
    /// A cache policy.
    Policy(CachePolicy),
    /// An output element type.
    Out(OutDtype),
}

impl fmt::Display for KnobValue {
    /// The value as the stored form and templates write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match self {
            KnobValue::Variant(x) => serde_json::to_value(x),
            KnobValue::Count(x) => serde_json::to_value(x),
            KnobValue::Flag(x) => serde_json::to_value(x),
            KnobValue::Auto(x) => serde_json::to_value(x),
            KnobValue::Mma(x) => serde_json::to_value(x),
            KnobValue::Policy(x) => serde_json::to_value(x),
            KnobValue::Out(x) => serde_json::to_value(x),
        };
        match v {
            Ok(serde_json::Value::String(s)) => f.write_str(&s),
            Ok(v) => write!(f, "{v}"),
            Err(_) => write!(f, "{self:?}"),
        }
    }
}

impl KnobValue {
    /// The count, for a count knob.
    pub fn count(self) -> Option<u32> {
        match self {
            KnobValue::Count(v) => Some(v),
            _ => None,
        }
    }

    /// The switch, for a flag knob.
    pub fn flag(self) -> Option<bool> {
        match self {
            KnobValue::Flag(v) => Some(v),
            _ => None,
        }
    }
}

/// A Rust type a knob can have.
pub trait KnobType: Copy + PartialEq + Serialize + DeserializeOwned + 'static {
    /// The value, generically.
    fn value(self) -> KnobValue;
    /// The value back, when it is of this type.
    fn from_value(v: KnobValue) -> Option<Self>;
    /// Reads one element of a template axis. Templates write an optional count's `None` as 0.
    fn from_axis(v: i64) -> Option<Self> {
        let _ = v;
        None
    }
}

macro_rules! knob_type {
    ($t:ty, $v:ident) => {
        impl KnobType for $t {
            fn value(self) -> KnobValue {
                KnobValue::$v(self)
            }
            fn from_value(v: KnobValue) -> Option<Self> {
                match v {
                    KnobValue::$v(x) => Some(x),
                    _ => None,
                }
            }
        }
    };
}

knob_type!(Variant, Variant);
knob_type!(bool, Flag);
knob_type!(MfmaShape, Mma);
knob_type!(CachePolicy, Policy);
knob_type!(OutDtype, Out);

impl KnobType for u32 {
    fn value(self) -> KnobValue {
        KnobValue::Count(self)
    }
    fn from_value(v: KnobValue) -> Option<Self> {
        v.count()
    }
    fn from_axis(v: i64) -> Option<Self> {
        u32::try_from(v).ok()
    }
}

impl KnobType for Option<u32> {
    fn value(self) -> KnobValue {
        KnobValue::Auto(self)
    }
    fn from_value(v: KnobValue) -> Option<Self> {
        match v {
            KnobValue::Auto(x) => Some(x),
            _ => None,
        }
    }
    fn from_axis(v: i64) -> Option<Self> {
        match v {
            0 => Some(None),
            _ => u32::try_from(v).ok().map(Some),
        }
    }
}

/// Where a knob lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The spec's structure: the variant, `wm` and the switches that make a scope present.
    Structure,
    /// Every spec.
    Common,
    /// The preshuffled-B kernel.
    Preb,
    /// Its prefetching pipeline (`b_prefetch`).
    Prefetch,
    /// The pipeline's per-cluster schedule (`cluster_drain_sched`).
    Cluster,
}

/// How a knob is written in the stored form ([`SpecValues`](crate::SpecValues)), which cache
/// keys hash: a knob added later is written only when set, so every spec without it keeps its
/// key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stored {
    /// Always written; a stored spec without it is refused.
    Required,
    /// Always written; a stored spec from before the knob existed reads as its default.
    Defaulted,
    /// Written only when it is not its default; absent reads as the default.
    UnlessDefault,
}

/// What a template axis of a knob accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Axis {
    /// Not searched: the knob has no axis.
    Fixed,
    /// Any values of the knob's type, each once.
    Values,
    /// Positive multiples of `multiple`, each once.
    Sizes {
        /// Every value is a multiple of this.
        multiple: u32,
        /// Why.
        why: &'static str,
    },
    /// Not searched: one value for a whole template (a scalar key of its space, the default
    /// where it has none).
    Setting,
}

impl Axis {
    /// Whether a template searches the knob over a list of values.
    pub fn searched(self) -> bool {
        matches!(self, Axis::Values | Axis::Sizes { .. })
    }
}

impl Knob {
    /// Reads one value of this knob's template axis (`space.<name>`) from any self-describing
    /// format (a TOML template's list element): an integer as the axis reads it (a size must be
    /// a positive multiple, an optional count's 0 is unset), anything else as the knob's type;
    /// then the knob's range. An error names the key, the value and the rule. Every template
    /// format (GEMM and MoE) reads its knob axes through this.
    pub fn axis_value<'de, D: serde::Deserializer<'de>>(self, d: D) -> Result<KnobValue, D::Error> {
        d.deserialize_any(AxisValue(self))
    }

    /// An integer element of this knob's axis, or the rule it breaks.
    fn axis_int(self, i: i64) -> Result<KnobValue, String> {
        let key = format!("space.{}", self.name());
        if let Axis::Sizes { multiple, why } = self.axis() {
            let x = u32::try_from(i)
                .ok()
                .filter(|&x| x > 0)
                .ok_or_else(|| format!("{key} = {i} must be a positive 32-bit integer"))?;
            if !x.is_multiple_of(multiple) {
                return Err(format!(
                    "{key} = {x} must be a multiple of {multiple} ({why})"
                ));
            }
            return Ok(KnobValue::Count(x));
        }
        self.from_axis(i)
            .ok_or_else(|| format!("{key} = {i} is not a value of {}", self.name()))
    }

    /// `value` within the knob's range, or the rule it breaks.
    fn axis_range(self, value: KnobValue) -> Result<KnobValue, String> {
        if let (Some(r), KnobValue::Auto(Some(x)) | KnobValue::Count(x)) = (self.range(), value)
            && !(r.min..=r.max).contains(&x)
        {
            let unset = if matches!(value, KnobValue::Auto(_)) {
                "0 (unset) or "
            } else {
                ""
            };
            return Err(format!(
                "space.{} = {x} must be {unset}{}..={} ({})",
                self.name(),
                r.min,
                r.max,
                r.why
            ));
        }
        Ok(value)
    }

    /// A non-integer element of this knob's axis, read as the knob's type.
    fn axis_typed<'de, D>(self, d: D) -> Result<KnobValue, String>
    where
        D: serde::Deserializer<'de, Error = serde::de::value::Error>,
    {
        self.deserialize_value(d)
            .map_err(|e| format!("space.{}: {}", self.name(), e.to_string().trim()))
    }
}

/// Reads one axis element of a knob (see [`Knob::axis_value`]).
struct AxisValue(Knob);

impl AxisValue {
    fn done<E: serde::de::Error>(&self, v: Result<KnobValue, String>) -> Result<KnobValue, E> {
        v.and_then(|v| self.0.axis_range(v)).map_err(E::custom)
    }
}

impl<'de> serde::de::Visitor<'de> for AxisValue {
    type Value = KnobValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value of {}", self.0.name())
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<KnobValue, E> {
        self.done(self.0.axis_int(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<KnobValue, E> {
        self.done(self.0.axis_int(i64::try_from(v).unwrap_or(i64::MAX)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<KnobValue, E> {
        self.done(self.0.axis_typed(v.into_deserializer()))
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<KnobValue, E> {
        self.done(self.0.axis_typed(v.into_deserializer()))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KnobValue, E> {
        self.done(self.0.axis_typed(v.into_deserializer()))
    }
}

/// A knob's range, checked by `validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    /// Smallest allowed.
    pub min: u32,
    /// Largest allowed.
    pub max: u32,
    /// Why.
    pub why: &'static str,
}

/// `stringify!` of a knob's name with `_` as `-`, as a `&'static str`: command-line flags are
/// kebab-case and clap keeps its names as static strings.
pub(crate) const fn kebab<const N: usize>(prefix: &str, name: &str) -> [u8; N] {
    let (p, n) = (prefix.as_bytes(), name.as_bytes());
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        let b = if i < p.len() { p[i] } else { n[i - p.len()] };
        out[i] = if b == b'_' { b'-' } else { b };
        i += 1;
    }
    out
}

/// Declares the knobs: each entry is `Knob [scope] name: type { default, piece, stored, axis,
/// range }` under its doc comment. See the module docs for what is generated.
///
/// - `default`: a closure of the variant giving the knob's default;
/// - `piece`: the rank of its piece in the kernel name and a closure of its value giving the
///   piece (`None`: nothing);
/// - `stored`: a [`Stored`]; `axis`: an [`Axis`]; `range`: an optional [`Range`].
///
/// The table's order is the stored form's field order (and so the cache keys'): new knobs go at
/// the end.
macro_rules! knobs {
    ($(
        $(#[doc = $doc:literal])+
        $Knob:ident [$scope:ident] $name:ident : $ty:ty {
            default: $default:expr,
            piece: $rank:literal => $piece:expr,
            stored: $stored:ident,
            axis: $axis:expr,
            range: $range:expr $(,)?
        }
    )*) => {
        /// A knob of the GEMM spec, in the stored form's order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Knob {
            $($(#[doc = $doc])+ $Knob,)*
        }

        impl Knob {
            /// Every knob, in the stored form's order.
            pub const ALL: &'static [Knob] = &[$(Knob::$Knob,)*];

            /// Its name: the stored form's field, the template axis and (kebab-case) the flag.
            pub fn name(self) -> &'static str {
                match self {
                    $(Knob::$Knob => stringify!($name),)*
                }
            }

            /// The command-line flag, without `--`: the name in kebab-case, `no-` before a
            /// switch that is on by default.
            pub fn flag(self) -> &'static str {
                let on_by_default = self.default_value(Variant::Preb) == KnobValue::Flag(true);
                match self {
                    $(Knob::$Knob => {
                        const N: usize = stringify!($name).len();
                        const PLAIN: [u8; N] = kebab::<N>("", stringify!($name));
                        const NO: [u8; N + 3] = kebab::<{ N + 3 }>("no-", stringify!($name));
                        let bytes: &'static [u8] = if on_by_default { &NO } else { &PLAIN };
                        // Both are ASCII: the knob's name with `-` for `_`.
                        std::str::from_utf8(bytes).unwrap_or(stringify!($name))
                    })*
                }
            }

            /// What it does.
            pub fn doc(self) -> &'static str {
                match self {
                    $(Knob::$Knob => concat!($($doc, "\n"),+).trim_ascii(),)*
                }
            }

            /// Where it lives.
            pub fn scope(self) -> Scope {
                match self {
                    $(Knob::$Knob => knobs!(@scope $scope),)*
                }
            }

            /// How the stored form writes it.
            pub fn stored(self) -> Stored {
                match self {
                    $(Knob::$Knob => Stored::$stored,)*
                }
            }

            /// What a template axis of it accepts.
            pub fn axis(self) -> Axis {
                match self {
                    $(Knob::$Knob => $axis,)*
                }
            }

            /// Its range, if it has one.
            pub fn range(self) -> Option<Range> {
                match self {
                    $(Knob::$Knob => $range,)*
                }
            }

            /// Its default on `variant`.
            pub fn default_value(self, variant: Variant) -> KnobValue {
                match self {
                    $(Knob::$Knob => {
                        let d: $ty = ($default)(variant);
                        d.value()
                    })*
                }
            }

            /// Whether `v` is a value of this knob's type.
            pub fn accepts(self, v: KnobValue) -> bool {
                match self {
                    $(Knob::$Knob => <$ty as KnobType>::from_value(v).is_some(),)*
                }
            }

            /// Reads one integer element of a template axis (`None`: not a value of the knob).
            pub fn from_axis(self, v: i64) -> Option<KnobValue> {
                match self {
                    $(Knob::$Knob => <$ty as KnobType>::from_axis(v).map(KnobType::value),)*
                }
            }

            /// Reads one element of a template axis or a command line from any self-describing
            /// format.
            pub fn deserialize_value<'de, D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<KnobValue, D::Error> {
                match self {
                    $(Knob::$Knob => <$ty as serde::Deserialize>::deserialize(d).map(KnobType::value),)*
                }
            }

            /// Rank of its piece in the kernel name.
            pub(crate) fn rank(self) -> u8 {
                match self {
                    $(Knob::$Knob => $rank,)*
                }
            }

            /// Its piece of the kernel name for value `v`.
            pub(crate) fn piece(self, v: KnobValue) -> Option<String> {
                match self {
                    $(Knob::$Knob => {
                        let piece: fn($ty) -> Option<String> = $piece;
                        <$ty as KnobType>::from_value(v).and_then(piece)
                    })*
                }
            }

            /// Its value in `spec`, or `None` where the spec has no such knob.
            pub fn get(self, spec: &super::KernelSpec) -> Option<KnobValue> {
                match self {
                    $(Knob::$Knob => knobs!(@get $scope spec $name $Knob),)*
                }
            }

            /// Sets it in `spec`; where the spec has no such knob, the error says why.
            pub fn set(self, spec: &mut super::KernelSpec, v: KnobValue) -> Result<(), super::SpecError> {
                match self {
                    $(Knob::$Knob => {
                        let x = <$ty as KnobType>::from_value(v).ok_or(super::SpecError::KnobType {
                            knob: self.name(),
                            value: v.to_string(),
                        })?;
                        knobs!(@set $scope spec $name $Knob x)
                    })*
                }
            }
        }

        /// A spec's stored form: every knob as a plain field, as tuning databases, kernel packs
        /// and cache keys hold it ([`SPEC_FORMAT`](crate::SPEC_FORMAT)). A knob the spec's
        /// variant or pipeline does not have holds its default. Read strictly: an unknown or
        /// repeated field is refused, and a stored spec becomes a
        /// [`KernelSpec`](crate::KernelSpec) only through `try_from`, which refuses a knob set
        /// where the spec has no place for it.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct SpecValues {
            $($(#[doc = $doc])+ pub $name: $ty,)*
        }

        impl SpecValues {
            /// Knob `k`'s value.
            pub fn get(&self, k: Knob) -> KnobValue {
                match k {
                    $(Knob::$Knob => self.$name.value(),)*
                }
            }

            /// Sets knob `k` (`false` when `v` is not of its type).
            pub(crate) fn put(&mut self, k: Knob, v: KnobValue) -> bool {
                match k {
                    $(Knob::$Knob => match <$ty as KnobType>::from_value(v) {
                        Some(x) => {
                            self.$name = x;
                            true
                        }
                        None => false,
                    },)*
                }
            }

            /// Every knob's default on `variant`.
            pub(crate) fn defaults(variant: Variant) -> Self {
                SpecValues {
                    $($name: ($default)(variant),)*
                }
            }
        }

        impl serde::Serialize for SpecValues {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let written = Knob::ALL.iter().filter(|k| self.written(**k)).count();
                let mut st = s.serialize_struct("SpecValues", written)?;
                $(
                    if self.written(Knob::$Knob) {
                        st.serialize_field(stringify!($name), &self.$name)?;
                    } else {
                        st.skip_field(stringify!($name))?;
                    }
                )*
                st.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for SpecValues {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Fields;
                impl<'de> serde::de::Visitor<'de> for Fields {
                    type Value = SpecValues;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a GEMM kernel spec (an object of knobs)")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut a: A,
                    ) -> Result<SpecValues, A::Error> {
                        use serde::de::Error;
                        // Fields, not locals: the table's names and this body's must meet.
                        #[derive(Default)]
                        struct Partial {
                            $($name: Option<$ty>,)*
                        }
                        let mut p = Partial::default();
                        while let Some(key) = a.next_key::<String>()? {
                            match key.as_str() {
                                $(stringify!($name) => {
                                    if p.$name.is_some() {
                                        return Err(A::Error::duplicate_field(stringify!($name)));
                                    }
                                    p.$name = Some(a.next_value()?);
                                })*
                                other => {
                                    const NAMES: &[&str] = &[$(stringify!($name),)*];
                                    return Err(A::Error::unknown_field(other, NAMES));
                                }
                            }
                        }
                        let variant: Variant = p.variant.ok_or_else(|| A::Error::missing_field("variant"))?;
                        let absent: Vec<Knob> = [$((Knob::$Knob, p.$name.is_none()),)*]
                            .into_iter()
                            .filter_map(|(k, none)| none.then_some(k))
                            .collect();
                        let mut values = SpecValues {
                            $($name: match p.$name {
                                Some(v) => v,
                                None if Stored::$stored == Stored::Required => {
                                    return Err(A::Error::missing_field(stringify!($name)));
                                }
                                None => ($default)(variant),
                            },)*
                        };
                        values.read_absent(&absent);
                        Ok(values)
                    }
                }
                d.deserialize_struct("SpecValues", &[$(stringify!($name),)*], Fields)
            }
        }

        $(knobs!(@setter $scope $name $ty [$($doc)+]);)*

        knobs!(@struct variant Common [] [] $({$scope $name ($ty) [$($doc)+] ($default)})*);
        knobs!(@struct variant PrebKnobs [] [] $({$scope $name ($ty) [$($doc)+] ($default)})*);
        knobs!(@struct variant Prefetch [] [] $({$scope $name ($ty) [$($doc)+] ($default)})*);
        knobs!(@struct variant ClusterSched [] [] $({$scope $name ($ty) [$($doc)+] ($default)})*);
    };

    (@scope Structure) => { Scope::Structure };
    (@scope Common) => { Scope::Common };
    (@scope PrebKnobs) => { Scope::Preb };
    (@scope Prefetch) => { Scope::Prefetch };
    (@scope ClusterSched) => { Scope::Cluster };

    (@get Structure $s:ident $name:ident $Knob:ident) => { $s.structure(Knob::$Knob) };
    (@get Common $s:ident $name:ident $Knob:ident) => { Some($s.common().$name.value()) };
    (@get PrebKnobs $s:ident $name:ident $Knob:ident) => { $s.preb_knobs().map(|k| k.$name.value()) };
    (@get Prefetch $s:ident $name:ident $Knob:ident) => {
        $s.prefetch_settings().map(|p| p.$name.value())
    };
    (@get ClusterSched $s:ident $name:ident $Knob:ident) => {
        $s.prefetch_settings()
            .and_then(|p| p.cluster.as_ref())
            .map(|c| c.$name.value())
    };

    (@set Structure $s:ident $name:ident $Knob:ident $x:ident) => { $s.set_structure(Knob::$Knob, $x.value()) };
    (@set Common $s:ident $name:ident $Knob:ident $x:ident) => {{
        $s.common_mut().$name = $x;
        Ok(())
    }};
    (@set PrebKnobs $s:ident $name:ident $Knob:ident $x:ident) => {{
        let missing = $s.missing_scope(Knob::$Knob);
        let k = $s.preb_knobs_mut().ok_or(missing)?;
        k.$name = $x;
        Ok(())
    }};
    (@set Prefetch $s:ident $name:ident $Knob:ident $x:ident) => {{
        let missing = $s.missing_scope(Knob::$Knob);
        let p = $s.preb_knobs_mut().and_then(|k| k.prefetch.as_mut()).ok_or(missing)?;
        p.$name = $x;
        Ok(())
    }};
    (@set ClusterSched $s:ident $name:ident $Knob:ident $x:ident) => {{
        let missing = $s.missing_scope(Knob::$Knob);
        let c = $s
            .preb_knobs_mut()
            .and_then(|k| k.prefetch.as_mut())
            .and_then(|p| p.cluster.as_mut())
            .ok_or(missing)?;
        c.$name = $x;
        Ok(())
    }};

    // Builder setters: a common knob on every spec type, the others on the type that holds
    // them.
    (@setter Structure $name:ident $ty:ty [$($doc:literal)+]) => {};
    (@setter Common $name:ident $ty:ty [$($doc:literal)+]) => {
        impl super::PrebSpec {
            $(#[doc = $doc])+
            pub fn $name(mut self, v: $ty) -> Self {
                self.common.$name = v;
                self
            }
        }
        impl super::LdsSpec {
            $(#[doc = $doc])+
            pub fn $name(mut self, v: $ty) -> Self {
                self.common.$name = v;
                self
            }
        }
        impl super::KernelSpec {
            $(#[doc = $doc])+
            pub fn $name(mut self, v: $ty) -> Self {
                self.common_mut().$name = v;
                self
            }
        }
    };
    (@setter PrebKnobs $name:ident $ty:ty [$($doc:literal)+]) => {
        impl super::PrebSpec {
            $(#[doc = $doc])+
            pub fn $name(mut self, v: $ty) -> Self {
                self.knobs.$name = v;
                self
            }
        }
    };
    (@setter Prefetch $name:ident $ty:ty [$($doc:literal)+]) => {
        impl super::Prefetch {
            $(#[doc = $doc])+
            pub fn $name(mut self, v: $ty) -> Self {
                self.$name = v;
                self
            }
        }
    };
    (@setter ClusterSched $name:ident $ty:ty [$($doc:literal)+]) => {
        impl super::ClusterSched {
            $(#[doc = $doc])+
            pub fn $name(mut self, v: $ty) -> Self {
                self.$name = v;
                self
            }
        }
    };

    // One scope's struct: its knobs' fields (the table's entries of that scope) and their
    // defaults. The structure a scope holds (the next scope down) is declared beside it.
    (@struct $v:ident $S:ident [$($field:tt)*] [$($init:tt)*]) => {
        knobs!(@emit $v $S [$($field)*] [$($init)*]);
    };
    (@struct $v:ident Common [$($field:tt)*] [$($init:tt)*]
        {Common $name:ident ($ty:ty) [$($doc:literal)+] ($default:expr)} $($rest:tt)*) => {
        knobs!(@struct $v Common [$($field)* $(#[doc = $doc])+ pub $name: $ty,]
            [$($init)* $name: ($default)($v),] $($rest)*);
    };
    (@struct $v:ident PrebKnobs [$($field:tt)*] [$($init:tt)*]
        {PrebKnobs $name:ident ($ty:ty) [$($doc:literal)+] ($default:expr)} $($rest:tt)*) => {
        knobs!(@struct $v PrebKnobs [$($field)* $(#[doc = $doc])+ pub $name: $ty,]
            [$($init)* $name: ($default)($v),] $($rest)*);
    };
    (@struct $v:ident Prefetch [$($field:tt)*] [$($init:tt)*]
        {Prefetch $name:ident ($ty:ty) [$($doc:literal)+] ($default:expr)} $($rest:tt)*) => {
        knobs!(@struct $v Prefetch [$($field)* $(#[doc = $doc])+ pub $name: $ty,]
            [$($init)* $name: ($default)($v),] $($rest)*);
    };
    (@struct $v:ident ClusterSched [$($field:tt)*] [$($init:tt)*]
        {ClusterSched $name:ident ($ty:ty) [$($doc:literal)+] ($default:expr)} $($rest:tt)*) => {
        knobs!(@struct $v ClusterSched [$($field)* $(#[doc = $doc])+ pub $name: $ty,]
            [$($init)* $name: ($default)($v),] $($rest)*);
    };
    (@struct $v:ident $S:ident [$($field:tt)*] [$($init:tt)*] {$other:ident $($entry:tt)*} $($rest:tt)*) => {
        knobs!(@struct $v $S [$($field)*] [$($init)*] $($rest)*);
    };

    (@emit $v:ident Common [$($field:tt)*] [$($init:tt)*]) => {
        /// The knobs every GEMM spec has (read through `Deref` on every spec type).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct Common {
            $($field)*
            /// Rows per wave; `None` while it follows `bm` (one wave over all of `BM`). Read
            /// it with [`KernelSpec::warp_m`](crate::KernelSpec::warp_m).
            pub(crate) wm: Option<u32>,
        }
        impl Common {
            pub(crate) fn defaults($v: Variant) -> Self {
                Common {
                    $($init)*
                    wm: super::spec::default_wm($v),
                }
            }
        }
    };
    (@emit $v:ident PrebKnobs [$($field:tt)*] [$($init:tt)*]) => {
        /// The preshuffled-B kernel's own knobs.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct PrebKnobs {
            $($field)*
            /// The prefetching K pipeline (`b_prefetch`), or none.
            pub prefetch: Option<Prefetch>,
        }
        impl Default for PrebKnobs {
            fn default() -> Self {
                let $v = Variant::Preb;
                PrebKnobs {
                    $($init)*
                    prefetch: None,
                }
            }
        }
    };
    (@emit $v:ident Prefetch [$($field:tt)*] [$($init:tt)*]) => {
        /// The prefetching K pipeline of the preshuffled-B kernel (`b_prefetch`): B tiles in
        /// flight ahead of the one multiplied, and how the pipeline is scheduled.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct Prefetch {
            $($field)*
            /// Per-cluster priority brackets and vmcnt staircase (`cluster_drain_sched`), or
            /// none.
            pub cluster: Option<ClusterSched>,
        }
        impl Default for Prefetch {
            fn default() -> Self {
                let $v = Variant::Preb;
                Prefetch {
                    $($init)*
                    cluster: None,
                }
            }
        }
    };
    (@emit $v:ident ClusterSched [$($field:tt)*] [$($init:tt)*]) => {
        /// The per-cluster schedule of the prefetching pipeline (`cluster_drain_sched`): each
        /// cluster of MFMAs runs at raised priority, and the B loads drain per cluster.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct ClusterSched {
            $($field)*
        }
        impl Default for ClusterSched {
            fn default() -> Self {
                let $v = Variant::Preb;
                ClusterSched {
                    $($init)*
                }
            }
        }
    };
}

pub(crate) use knobs;
