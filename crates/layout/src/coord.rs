//! Hierarchical integer tuples: the one type for shapes, strides and coordinates.

use std::fmt;

use crate::int::{Idx, IndexValue};

/// A hierarchical tuple of [`Idx`]: an integer leaf or a tuple of coordinates.
///
/// Shapes, strides and coordinates are all `Coord`s, as in CuTe's `IntTuple` and Mojo's `Coord`.
#[derive(Clone, Debug, PartialEq)]
pub enum Coord<T = i64> {
    /// An integer.
    Leaf(Idx<T>),
    /// A tuple of coordinates (possibly empty).
    Tuple(Vec<Coord<T>>),
}

impl<T> Coord<T> {
    /// An integer leaf.
    pub fn int(v: impl Into<Idx<T>>) -> Self {
        Coord::Leaf(v.into())
    }

    /// A tuple.
    pub fn tuple(items: Vec<Coord<T>>) -> Self {
        Coord::Tuple(items)
    }

    /// A dynamic leaf.
    pub fn dynamic(v: T) -> Self {
        Coord::Leaf(Idx::Dynamic(v))
    }

    /// Whether this is a leaf.
    pub fn is_leaf(&self) -> bool {
        matches!(self, Coord::Leaf(_))
    }

    /// Number of top-level modes; a leaf has rank 1.
    pub fn rank(&self) -> usize {
        match self {
            Coord::Leaf(_) => 1,
            Coord::Tuple(v) => v.len(),
        }
    }

    /// Nesting depth: a leaf is 0, a flat tuple 1.
    pub fn depth(&self) -> usize {
        match self {
            Coord::Leaf(_) => 0,
            Coord::Tuple(v) => 1 + v.iter().map(Coord::depth).max().unwrap_or(0),
        }
    }

    /// Top-level mode `i`; a leaf's only mode is itself.
    pub fn mode(&self, i: usize) -> Option<&Coord<T>> {
        match self {
            Coord::Leaf(_) if i == 0 => Some(self),
            Coord::Leaf(_) => None,
            Coord::Tuple(v) => v.get(i),
        }
    }

    /// Top-level modes as a slice (a leaf is its own single mode).
    pub fn modes(&self) -> &[Coord<T>] {
        match self {
            Coord::Leaf(_) => std::slice::from_ref(self),
            Coord::Tuple(v) => v,
        }
    }

    /// The leaves, depth first.
    pub fn leaves(&self) -> Vec<&Idx<T>> {
        let mut out = Vec::new();
        self.collect_leaves(&mut out);
        out
    }

    fn collect_leaves<'a>(&'a self, out: &mut Vec<&'a Idx<T>>) {
        match self {
            Coord::Leaf(i) => out.push(i),
            Coord::Tuple(v) => v.iter().for_each(|c| c.collect_leaves(out)),
        }
    }

    /// Same tree structure (profile) as `other`.
    pub fn congruent<U>(&self, other: &Coord<U>) -> bool {
        match (self, other) {
            (Coord::Leaf(_), Coord::Leaf(_)) => true,
            (Coord::Tuple(a), Coord::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.congruent(y))
            }
            _ => false,
        }
    }

    /// Apply `f` to every leaf, keeping the structure.
    pub fn map<U>(&self, f: &mut impl FnMut(&Idx<T>) -> Idx<U>) -> Coord<U> {
        match self {
            Coord::Leaf(i) => Coord::Leaf(f(i)),
            Coord::Tuple(v) => Coord::Tuple(v.iter().map(|c| c.map(f)).collect()),
        }
    }

    /// All leaves static.
    pub fn is_static(&self) -> bool {
        self.leaves().iter().all(|i| i.is_static())
    }

    /// The static leaves, depth first, or `None` if any is dynamic.
    pub fn static_leaves(&self) -> Option<Vec<i64>> {
        self.leaves().iter().map(|i| i.static_value()).collect()
    }
}

impl<T: Clone> Coord<T> {
    /// The flat tuple of leaves.
    pub fn flatten(&self) -> Coord<T> {
        Coord::Tuple(
            self.leaves()
                .into_iter()
                .cloned()
                .map(Coord::Leaf)
                .collect(),
        )
    }

    /// Structure of `self` filled with the leaves of `flat` in order (`flat` must have as many
    /// leaves as `self`).
    pub(crate) fn unflatten_like<U>(&self, flat: &mut impl Iterator<Item = Idx<U>>) -> Coord<U> {
        match self {
            Coord::Leaf(_) => Coord::Leaf(flat.next().expect("leaf count checked by caller")),
            Coord::Tuple(v) => Coord::Tuple(v.iter().map(|c| c.unflatten_like(flat)).collect()),
        }
    }
}

impl<T: IndexValue> Coord<T> {
    /// Product of the leaves (the size of a shape); an empty tuple has product 1.
    pub fn product(&self) -> Idx<T> {
        self.leaves()
            .into_iter()
            .fold(Idx::Static(1), |acc, i| acc.mul(i))
    }

    /// Sum of the leaves.
    pub fn sum(&self) -> Idx<T> {
        self.leaves()
            .into_iter()
            .fold(Idx::Static(0), |acc, i| acc.add(i))
    }
}

impl<T> From<Idx<T>> for Coord<T> {
    fn from(v: Idx<T>) -> Self {
        Coord::Leaf(v)
    }
}

macro_rules! coord_from_int {
    ($($t:ty),*) => {$(
        impl<T> From<$t> for Coord<T> {
            fn from(v: $t) -> Self {
                Coord::Leaf(Idx::from(v))
            }
        }
    )*};
}
coord_from_int!(i64, i32, usize, u32);

impl<T> From<Vec<Coord<T>>> for Coord<T> {
    fn from(v: Vec<Coord<T>>) -> Self {
        Coord::Tuple(v)
    }
}

macro_rules! coord_from_tuple {
    ($($name:ident),+) => {
        impl<T, $($name: Into<Coord<T>>),+> From<($($name,)+)> for Coord<T> {
            #[allow(non_snake_case)]
            fn from(($($name,)+): ($($name,)+)) -> Self {
                Coord::Tuple(vec![$($name.into()),+])
            }
        }
    };
}
coord_from_tuple!(A);
coord_from_tuple!(A, B);
coord_from_tuple!(A, B, C);
coord_from_tuple!(A, B, C, D);
coord_from_tuple!(A, B, C, D, E);
coord_from_tuple!(A, B, C, D, E, F);
coord_from_tuple!(A, B, C, D, E, F, G);
coord_from_tuple!(A, B, C, D, E, F, G, H);

impl<T, const N: usize> From<[i64; N]> for Coord<T> {
    fn from(v: [i64; N]) -> Self {
        Coord::Tuple(v.iter().map(|&x| Coord::int(x)).collect())
    }
}

impl<T: fmt::Display> fmt::Display for Coord<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coord::Leaf(i) => write!(f, "{i}"),
            Coord::Tuple(v) => {
                f.write_str("(")?;
                for (n, c) in v.iter().enumerate() {
                    if n > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_queries() {
        let c: Coord = Coord::from((4, (16, 2)));
        assert_eq!(c.rank(), 2);
        assert_eq!(c.depth(), 2);
        assert_eq!(c.product().static_value(), Some(128));
        assert_eq!(c.static_leaves(), Some(vec![4, 16, 2]));
        assert_eq!(c.to_string(), "(4,(16,2))");
        assert!(c.congruent(&Coord::<i64>::from((1, (4, 64)))));
        assert!(!c.congruent(&Coord::<i64>::from((1, 4, 64))));
        assert_eq!(c.flatten().to_string(), "(4,16,2)");
    }
}
