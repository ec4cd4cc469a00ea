//! Parallel layout-to-layout copies on top of [`CopyPlan`].

use rayon::prelude::*;
use tilegen_layout::{CopyPlan, Layout};

use crate::error::MxError;

/// Work per rayon task, in elements: small pieces cost more in scheduling than they copy.
const MIN_TASK_ELEMENTS: usize = 1 << 16;

/// `dst[dst_layout(i)] = src[src_layout(i)]` for every `i` of the layouts' common domain
/// (see [`CopyPlan::new`] for the requirements on the layouts).
pub fn copy_layout<E: Copy + Send + Sync>(
    src_layout: &Layout,
    dst_layout: &Layout,
    src: &[E],
    dst: &mut [E],
) -> Result<(), MxError> {
    let plan = CopyPlan::new(src_layout, dst_layout)?;
    copy_with_plan(&plan, src, dst)
}

/// Runs `plan`, in parallel over its outermost mode when the steps of that mode write disjoint
/// consecutive chunks of `dst` (always the case for a compact destination layout); otherwise
/// sequentially. Both buffers are checked against the plan's spans first.
pub fn copy_with_plan<E: Copy + Send + Sync>(
    plan: &CopyPlan,
    src: &[E],
    dst: &mut [E],
) -> Result<(), MxError> {
    plan.check_buffers(src.len(), dst.len())?;
    match plan.split_outer() {
        // Step j writes only dst[j * chunk..][..inner.dst_span()], which lies inside chunk j.
        Some((outer, inner)) if outer.dst_stride > 0 && inner.dst_span() <= outer.dst_stride => {
            let min_len = (MIN_TASK_ELEMENTS / inner.size().max(1)).max(1);
            dst.par_chunks_mut(outer.dst_stride)
                .take(outer.extent)
                .enumerate()
                .with_min_len(min_len)
                .for_each(|(j, out)| copy_runs(&inner, &src[j * outer.src_stride..], out));
        }
        _ => copy_runs(plan, src, dst),
    }
    Ok(())
}

/// The sequential copy, with the common run lengths as compile-time constants so each run
/// becomes a few fixed-size moves instead of a `memcpy` call.
fn copy_runs<E: Copy>(plan: &CopyPlan, src: &[E], dst: &mut [E]) {
    match plan.run_len() {
        1 => plan.for_each_run(|s, d| dst[d] = src[s]),
        2 => fixed::<E, 2>(plan, src, dst),
        4 => fixed::<E, 4>(plan, src, dst),
        8 => fixed::<E, 8>(plan, src, dst),
        16 => fixed::<E, 16>(plan, src, dst),
        32 => fixed::<E, 32>(plan, src, dst),
        64 => fixed::<E, 64>(plan, src, dst),
        r => plan.for_each_run(|s, d| dst[d..d + r].copy_from_slice(&src[s..s + r])),
    }
}

fn fixed<E: Copy, const R: usize>(plan: &CopyPlan, src: &[E], dst: &mut [E]) {
    plan.for_each_run(|s, d| dst[d..d + R].copy_from_slice(&src[s..s + R]));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tilegen_layout::{Coord, WalkError};

    fn naive(src_l: &Layout, dst_l: &Layout, src: &[u16], dst_len: usize) -> Vec<u16> {
        let mut out = vec![0u16; dst_len];
        let n = src_l.size().static_value().unwrap();
        for i in 0..n {
            let s = src_l.call(i).static_value().unwrap() as usize;
            let d = dst_l.call(i).static_value().unwrap() as usize;
            out[d] = src[s];
        }
        out
    }

    #[test]
    fn buffer_checks_are_errors() {
        let l = Layout::<i64>::col_major((4, 8));
        let t = Layout::new((4, 8), (8, 1)).unwrap();
        assert!(matches!(
            copy_layout(&l, &t, &[0u8; 31], &mut [0u8; 32]),
            Err(MxError::Walk(WalkError::BufferTooSmall {
                which: "source",
                ..
            }))
        ));
        assert!(matches!(
            copy_layout(
                &l,
                &Layout::<i64>::col_major((8, 4)),
                &[0u8; 32],
                &mut [0u8; 32]
            ),
            Err(MxError::Walk(WalkError::DomainMismatch { .. }))
        ));
    }

    /// Random 3-level tiled transposes: (a, b, c) blocks permuted between source and destination.
    fn tiled() -> impl Strategy<Value = (Layout, Layout)> {
        (1i64..=4, 1i64..=4, 1i64..=4, 1i64..=4, 1i64..=20, 0usize..6).prop_map(
            |(a, b, c, d, run, perm)| {
                let shape: Coord = Coord::from((run, (a, b), (c, d)));
                let src = Layout::col_major(shape.clone());
                let order = [
                    [0, 1, 2, 3, 4],
                    [0, 2, 1, 4, 3],
                    [0, 3, 4, 1, 2],
                    [0, 4, 3, 2, 1],
                    [1, 0, 2, 3, 4],
                    [0, 1, 3, 2, 4],
                ][perm];
                let extents = [run, a, b, c, d];
                let mut strides = [0i64; 5];
                let mut running = 1;
                for &p in &order {
                    strides[p] = running;
                    running *= extents[p];
                }
                let stride = Coord::from((
                    strides[0],
                    (strides[1], strides[2]),
                    (strides[3], strides[4]),
                ));
                (src, Layout::new(shape, stride).unwrap())
            },
        )
    }

    proptest! {
        #[test]
        fn parallel_copy_matches_per_element_copy((src_l, dst_l) in tiled()) {
            let n = src_l.size().static_value().unwrap() as usize;
            let src: Vec<u16> = (0..n as u16).map(|x| x.wrapping_mul(31)).collect();
            let mut got = vec![0u16; n];
            copy_layout(&src_l, &dst_l, &src, &mut got).unwrap();
            prop_assert_eq!(got, naive(&src_l, &dst_l, &src, n));
        }
    }

    #[test]
    fn large_copy_exercises_the_parallel_path() {
        // 16-element runs, 2^18 elements: the outer mode splits into many rayon tasks.
        let shape: Coord = Coord::from((16, 64, 256));
        let src_l = Layout::col_major(shape.clone());
        let dst_l = Layout::new(shape, (1, 16 * 256, 16)).unwrap();
        let plan = CopyPlan::new(&src_l, &dst_l).unwrap();
        assert_eq!(plan.run_len(), 16);
        assert!(plan.split_outer().is_some());
        let src: Vec<u16> = (0..1u32 << 18).map(|x| (x * 7) as u16).collect();
        let mut got = vec![0u16; src.len()];
        copy_with_plan(&plan, &src, &mut got).unwrap();
        assert_eq!(got, naive(&src_l, &dst_l, &src, src.len()));
    }
}
