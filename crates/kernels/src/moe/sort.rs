//! The routing's sort on the device: one workgroup groups a pass's (token, slot) pairs by
//! expert into the sorted layout the grouped kernels read ([`super::SortedBlocks`]), so a
//! serving engine hands the layer its top-k ids and weights and never waits for the host.
//!
//! Pair `p` (`token * topk + slot`) routed to expert `e` lands in one of `e`'s blocks: the
//! experts' blocks follow each other in expert order, each expert's run padded to whole
//! blocks of `BM` rows with the padding entry `pairs`. Within an expert the pairs' order is
//! the order in which the workgroup's LDS atomics served them, so it varies between runs and
//! devices; every kernel of the layer computes a row from its own pair alone, so the layer's
//! result does not depend on it. The grids of the grouped kernels cannot know the block count
//! before this kernel runs: they are sized by [`max_blocks`], and the blocks past the count
//! get expert [`NO_EXPERT`] (their rows padding), which the kernels see and leave at once.
//!
//! One workgroup is enough for a pass: it reads the ids twice (a count, then a scatter), and
//! a pass holds at most a few tens of thousands of pairs.

use tilegen_dsl::{
    Buffer, CachePolicy, I32Param, Int, Kernel, Lds, PtrParam, Result, Signature, Ty,
};
use tilegen_layout::{Coord, Idx, Layout};

/// Work-items of the sort's one workgroup.
pub(crate) const SORT_THREADS: u32 = 1024;

/// Most experts the device sort groups (its per-expert counters live in LDS).
pub const MAX_SORT_EXPERTS: usize = 2048;

/// LDS of the sort: three counters per expert and the block count.
pub(crate) const SORT_LDS_BYTES: u64 = 4 * (3 * MAX_SORT_EXPERTS as u64 + 4);

/// The expert of a block past the sort's count: no expert (the grouped kernels' workgroups of
/// such blocks leave at once).
pub const NO_EXPERT: u32 = u32::MAX;

/// [`NO_EXPERT`] as a device integer.
fn no_expert<'k, 'ctx>(k: &'k Kernel<'ctx>) -> Int<'k, 'ctx> {
    k.i32(i64::from(NO_EXPERT as i32))
}

/// Ends the workgroup if block expert `e` (wave-uniform) is [`NO_EXPERT`], the one id with
/// the sign bit set.
pub(crate) fn leave_without_expert<'k, 'ctx>(k: &'k Kernel<'ctx>, e: Int<'k, 'ctx>) -> Result<()> {
    k.exit_unless(no_expert(k).lt(&e))
}

/// Experts each lane of the wave that computes the block offsets scans.
const EXPERTS_PER_LANE: i64 = MAX_SORT_EXPERTS as i64 / 64;

/// Most blocks `pairs` pairs over `experts` experts can take in blocks of `block_m` rows: each
/// of at most `min(experts, pairs)` experts pads its run by fewer than `block_m` rows, so
/// `sum ceil(c_e / block_m) <= (pairs + min(experts, pairs) (block_m - 1)) / block_m`.
pub fn max_blocks(pairs: usize, experts: usize, block_m: usize) -> usize {
    let touched = experts.min(pairs);
    (pairs + touched * block_m.saturating_sub(1)) / block_m.max(1)
}

/// Parameters of the sort kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SortParams {
    sorted_ids: PtrParam,
    block_expert: PtrParam,
    ids: PtrParam,
    pairs: I32Param,
    experts: I32Param,
    max_blocks: I32Param,
}

/// The sort kernel's signature: `(sorted_ids, block_expert, ids, pairs, experts,
/// max_blocks)`: `ids` the pairs' experts `[pairs]` (u32, each below `experts`); out
/// `sorted_ids` `[max_blocks * BM]` and `block_expert` `[max_blocks]` (u32), entries past the
/// blocks the routing fills set to padding and [`NO_EXPERT`].
pub(crate) fn sort_signature() -> (Signature, SortParams) {
    let mut s = Signature::new();
    let p = SortParams {
        sorted_ids: s.global_ptr("sorted_ids"),
        block_expert: s.global_ptr("block_expert"),
        ids: s.global_ptr("ids"),
        pairs: s.i32("pairs"),
        experts: s.i32("experts"),
        max_blocks: s.i32("max_blocks"),
    };
    (s, p)
}

/// Pairs a work-item loads before it uses the first: the loads of a pass over the ids are in
/// flight together instead of one latency each.
const PAIRS_IN_FLIGHT: i64 = 8;

/// Emits the sort for blocks of `block_m` rows.
pub(crate) fn sort<'k, 'ctx>(k: &'k Kernel<'ctx>, block_m: u32) -> Result<()> {
    let (_, p) = sort_signature();
    let tid = k.thread_id()?;
    let lane = tid % 64;
    let wave = k.readfirstlane(tid / 64)?;
    let pairs = k.i32_arg(p.pairs)?;
    let experts = k.i32_arg(p.experts)?;
    let max_blocks = k.i32_arg(p.max_blocks)?;
    let (bm, threads) = (i64::from(block_m), i64::from(SORT_THREADS));
    let z = k.i32(0);
    let i32t = Ty::I32;
    // One u32 per item: pairs, experts, blocks; the sorted rows as (row, block).
    let words = |n: Int<'k, 'ctx>| Layout::new(n.idx(), Idx::Static(4));
    let at = |l: &Layout<Int<'k, 'ctx>>, i: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
        Ok(l.crd2idx(&Coord::Leaf(i.idx()))?.to_value(&z))
    };
    let rows_l = Layout::new(
        (Idx::Static(bm), max_blocks.idx()),
        (Idx::Static(4), Idx::Static(4 * bm)),
    )?;
    let row_at = |r: Int<'k, 'ctx>, b: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
        Ok(rows_l
            .crd2idx(&Coord::from((r.idx(), b.idx())))?
            .to_value(&z))
    };
    let pair_l = words(pairs)?;
    let expert_l = words(k.i32(MAX_SORT_EXPERTS as i64))?;
    let block_l = words(max_blocks)?;
    // Lane l of wave 0 scans experts [l E', (l + 1) E'): (expert in the lane's run, lane).
    let lane_l = Layout::new(
        (Idx::Static(EXPERTS_PER_LANE), Idx::Static(64)),
        (Idx::Static(4), Idx::Static(4 * EXPERTS_PER_LANE)),
    )?;
    let lds_words = |name: &str, n: i64| k.lds_alloc(name, (4 * n) as u32, 16);
    // Per expert: its pairs, the pairs scattered so far, its first block; and the block count.
    let count = lds_words("sort_count", MAX_SORT_EXPERTS as i64)?;
    let fill = lds_words("sort_fill", MAX_SORT_EXPERTS as i64)?;
    let first = lds_words("sort_first", MAX_SORT_EXPERTS as i64)?;
    let total_lds = lds_words("sort_total", 4)?;
    let ids = k.buffer(k.ptr_arg(p.ids)?, pairs * 4, CachePolicy::Always)?;
    let sorted = k.buffer(
        k.ptr_arg(p.sorted_ids)?,
        max_blocks * (4 * bm),
        CachePolicy::Always,
    )?;
    let block_expert = k.buffer(
        k.ptr_arg(p.block_expert)?,
        max_blocks * 4,
        CachePolicy::Always,
    )?;
    let load_count = |lds, e: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
        k.lds_load(lds, at(&expert_l, e)?, i32t, 4)?.int(k)
    };
    // `body(pair, expert)` for each of the work-item's pairs, `PAIRS_IN_FLIGHT` loads issued
    // before the first is used (indices past the pairs load the last one and are skipped).
    // An id at or past `experts` (which the host routing refuses) is skipped too, not counted
    // into LDS past the experts'.
    let each_pair = |body: &dyn Fn(Int<'k, 'ctx>, Int<'k, 'ctx>) -> Result<()>| {
        k.for_range(tid, pairs, threads * PAIRS_IN_FLIGHT, |i0| {
            let last = pairs - 1;
            let loaded = (0..PAIRS_IN_FLIGHT)
                .map(|j| {
                    let i = i0 + j * threads;
                    let e = k.buffer_load(&ids, at(&pair_l, i.min(&last))?, z, 1)?;
                    Ok((i, e))
                })
                .collect::<Result<Vec<_>>>()?;
            for (i, e) in loaded {
                let e = e.int(k)?;
                k.if_then(i.lt(&pairs), || k.if_then(e.lt(&experts), || body(i, e)))?;
            }
            Ok(())
        })
    };

    for j in 0..(MAX_SORT_EXPERTS as u64).div_ceil(u64::from(SORT_THREADS)) as i64 {
        let e = tid + j * threads;
        k.if_then(e.lt(&k.i32(MAX_SORT_EXPERTS as i64)), || {
            k.lds_store(&count, at(&expert_l, e)?, z.into(), 4)?;
            k.lds_store(&fill, at(&expert_l, e)?, z.into(), 4)
        })?;
    }
    k.barrier()?;
    each_pair(&|_, e| {
        k.lds_atomic_add(&count, at(&expert_l, e)?, k.i32(1))
            .map(|_| ())
    })?;
    k.barrier()?;

    // Wave 0 turns the counts into each expert's first block: lane l sums the blocks of its
    // run of experts, a scan across the lanes (ds_bpermute, no LDS round trips or barriers)
    // gives the blocks before the run, and the lane writes its experts' first blocks.
    let blocks_of = |c: Int<'k, 'ctx>| (c + (bm - 1)) / bm;
    k.if_then(wave.eq(&z), || {
        let counts = (0..EXPERTS_PER_LANE)
            .map(|j| {
                let off = lane_l.crd2idx(&Coord::from((Idx::Static(j), lane.idx())))?;
                k.lds_load(&count, off.to_value(&z), i32t, 4)?.int(k)
            })
            .collect::<Result<Vec<_>>>()?;
        let mine = counts.iter().fold(z, |acc, &c| acc + blocks_of(c));
        let mut scan = mine;
        let mut d = 1;
        while d < 64 {
            let from = (lane + (64 - d)) % 64 * 4;
            let other = k.bpermute(from, scan.into())?.int(k)?;
            scan = scan + other.select(k.i32(d - 1).lt(&lane), &z);
            d *= 2;
        }
        let mut next = scan - mine;
        for (j, &c) in counts.iter().enumerate() {
            let off = lane_l.crd2idx(&Coord::from((Idx::Static(j as i64), lane.idx())))?;
            k.lds_store(&first, off.to_value(&z), next.into(), 4)?;
            next = next + blocks_of(c);
        }
        let total = k.bpermute(k.i32(63 * 4), scan.into())?;
        k.if_then(lane.eq(&z), || k.lds_store(&total_lds, z, total, 4))
    })?;
    k.barrier()?;
    let total = k.lds_load(&total_lds, z, i32t, 4)?.int(k)?;
    let pad = pairs;
    // Each expert's blocks, and the padding rows of its run's last block.
    k.for_range(tid, experts, threads, |e| {
        let c = load_count(&count, e)?;
        let b0 = load_count(&first, e)?;
        let nb = blocks_of(c);
        k.for_range(z, nb, 1, |b| {
            k.buffer_store(&block_expert, e.into(), at(&block_l, b0 + b)?, z)
        })?;
        k.if_then(z.lt(&(c % bm)), || {
            let last = b0 + nb - 1;
            k.for_range(c % bm, k.i32(bm), 1, |r| {
                k.buffer_store(&sorted, pad.into(), row_at(r, last)?, z)
            })
        })
    })?;
    // Blocks past the routing's: no expert, padding rows.
    k.for_range(total + tid, max_blocks, threads, |b| {
        k.buffer_store(&block_expert, no_expert(k).into(), at(&block_l, b)?, z)?;
        k.for_range(z, k.i32(bm), 1, |r| {
            k.buffer_store(&sorted, pad.into(), row_at(r, b)?, z)
        })
    })?;
    each_pair(&|i, e| {
        let r = k.lds_atomic_add(&fill, at(&expert_l, e)?, k.i32(1))?;
        let b0 = load_count(&first, e)?;
        // Row r of the expert's run: row r % BM of its block r / BM.
        k.buffer_store(&sorted, i.into(), row_at(r % bm, b0 + r / bm)?, z)
    })
}

/// Most pairs a pass may have for the gate/up kernel to group them itself
/// ([`super::MoeSpec::fused_sort`]): one wave holds them, a pair a lane.
pub const FUSED_SORT_PAIRS: usize = 64;

/// LDS of [`block_in_wave`]: two words per pair (expert, blocks) for the wave's 64 lanes.
pub(crate) const FUSED_SORT_LDS_BYTES: u64 = 4 * 2 * 64;

/// Pairs [`block_in_wave`] reads per step of its passes (four 16-byte LDS reads issued
/// together, one latency a step).
const FUSED_GROUP: i64 = 16;

/// One wave (all 64 lanes active) groups a pass's `pairs` pairs (at most
/// [`FUSED_SORT_PAIRS`]; their experts in `ids`) as the sort kernel's layout would and
/// writes block `block` of it to `rows` (`bm` words: each row's pair, `pairs` for padding);
/// returns the block's expert ([`NO_EXPERT`] past the blocks the pairs fill), the same in
/// every lane. Every workgroup that calls it for a block computes the same rows: a pair's
/// place in its expert's run is the count of the expert's pairs before it, not an atomic's
/// turn. Each lane holds one pair; two passes over the pairs (read from `scratch`,
/// [`FUSED_SORT_LDS_BYTES`], [`FUSED_GROUP`] a step) count and place them, and each lane
/// whose pair lands in the block writes its row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_in_wave<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    ids: &Buffer<'ctx>,
    pairs: Int<'k, 'ctx>,
    lane: Int<'k, 'ctx>,
    block: Int<'k, 'ctx>,
    bm: i64,
    scratch: &Lds<'ctx>,
    rows: &Lds<'ctx>,
) -> Result<Int<'k, 'ctx>> {
    let z = k.i32(0);
    // Past the pairs: an expert above every real one, which no pair counts as its own.
    let none = k.i32(i64::from(i32::MAX));
    // (pair, field) -> byte of the scratch: expert, blocks.
    let table = Layout::new(
        (Idx::Static(64), Idx::Static(2)),
        (Idx::Static(4), Idx::Static(256)),
    )?;
    let cell = |j: Int<'k, 'ctx>, f: i64| -> Result<Int<'k, 'ctx>> {
        Ok(table
            .crd2idx(&Coord::from((j.idx(), Idx::Static(f))))?
            .to_value(&z))
    };
    let (expert_f, blocks_f) = (0, 1);
    let mine = lane.lt(&pairs);
    let pair_l = Layout::new(Idx::Static(FUSED_SORT_PAIRS as i64), Idx::Static(4))?;
    let at = pair_l.crd2idx(&Coord::Leaf(lane.min(&(pairs - 1)).idx()))?;
    let e = k
        .buffer_load(ids, at.to_value(&z), z, 1)?
        .int(k)?
        .select(mine, &none);
    k.lds_store(scratch, cell(lane, expert_f)?, e.into(), 4)?;
    // `body(j, values)` for each pair `j` of the pass (and those up to the step's end, which
    // read what lanes past the pairs wrote): `values[f]` is field `fields[f]` of pair `j`.
    let over = |fields: &[i64], body: &dyn Fn(Int<'k, 'ctx>, &[Int<'k, 'ctx>]) -> Result<()>| {
        k.for_range(z, pairs, FUSED_GROUP, |j0| {
            let loaded = fields
                .iter()
                .map(|&f| {
                    (0..FUSED_GROUP / 4)
                        .map(|g| k.lds_load(scratch, cell(j0 + 4 * g, f)?, Ty::dwords(4), 16))
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            for q in 0..FUSED_GROUP {
                let vals = loaded
                    .iter()
                    .map(|v| k.slice(v[(q / 4) as usize], (q % 4) as u32, 1)?.int(k))
                    .collect::<Result<Vec<_>>>()?;
                body(j0 + q, &vals)?;
            }
            Ok(())
        })
    };
    // Pass 1: the pairs of my expert before me (my place in its run) and in all.
    let before_me = k.var(z.into())?;
    let same = k.var(z.into())?;
    over(&[expert_f], &|j, v| {
        let hit = k.i32(1).select(v[0].eq(&e), &z);
        let n = k.get(&same)?.int(k)?;
        k.set(&same, (n + hit).into())?;
        let n = k.get(&before_me)?.int(k)?;
        k.set(&before_me, (n + hit.select(j.lt(&lane), &z)).into())
    })?;
    let place = k.get(&before_me)?.int(k)?;
    let count = k.get(&same)?.int(k)?;
    // The first pair of an expert speaks for its blocks.
    let blocks = ((count + (bm - 1)) / bm)
        .select(place.eq(&z), &z)
        .select(mine, &z);
    k.lds_store(scratch, cell(lane, blocks_f)?, blocks.into(), 4)?;
    // Pass 2: the blocks of the experts below mine come first; all of them in all.
    let first = k.var(z.into())?;
    let total = k.var(z.into())?;
    over(&[expert_f, blocks_f], &|_, v| {
        let f = k.get(&first)?.int(k)?;
        k.set(&first, (f + v[1].select(v[0].lt(&e), &z)).into())?;
        let t = k.get(&total)?.int(k)?;
        k.set(&total, (t + v[1]).into())
    })?;
    let first = k.get(&first)?.int(k)?;
    let total = k.readfirstlane(k.get(&total)?.int(k)?)?;
    // The block's rows: padding, then each pair whose row (`place % bm` of block `first +
    // place / bm`) is in the block over its padding (the same wave's LDS writes land in
    // program order).
    let row_l = Layout::new(Idx::Static(bm), Idx::Static(4))?;
    let row_at = |r: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
        Ok(row_l.crd2idx(&Coord::Leaf(r.idx()))?.to_value(&z))
    };
    k.if_then(lane.lt(&k.i32(bm)), || {
        k.lds_store(rows, row_at(lane)?, pairs.into(), 4)
    })?;
    let row = first * bm + place - block * bm;
    k.if_then(mine, || {
        k.if_then(k.i32(-1).lt(&row), || {
            k.if_then(row.lt(&k.i32(bm)), || {
                k.lds_store(rows, row_at(row)?, lane.into(), 4)
            })
        })
    })?;
    // The block's expert: its first row's pair's (every block the pairs fill has one).
    let pair0 = k.readfirstlane(k.lds_load(rows, z, Ty::I32, 4)?.int(k)?)?;
    let e0 = k
        .lds_load(scratch, cell(pair0.min(&k.i32(63)), expert_f)?, Ty::I32, 4)?
        .int(k)?;
    k.readfirstlane(e0.select(block.lt(&total), &no_expert(k)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::moe::Routing;
    use proptest::prelude::*;

    proptest! {
        /// No routing of `tokens` tokens over `experts` experts takes more blocks than the
        /// grids are sized for.
        #[test]
        fn max_blocks_bounds_every_routing(
            experts in 1usize..40,
            topk_seed in 0usize..8,
            tokens in 1usize..60,
            bm in prop::sample::select(vec![1usize, 16, 32, 64, 128]),
            seed in any::<u64>(),
        ) {
            let topk = 1 + topk_seed % experts.min(8);
            let mut s = seed | 1;
            let ids: Vec<u32> = (0..tokens)
                .flat_map(|_| {
                    // k distinct experts per token from a seeded shuffle.
                    let mut e: Vec<u32> = (0..experts as u32).collect();
                    for i in (1..e.len()).rev() {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        e.swap(i, (s % (i as u64 + 1)) as usize);
                    }
                    e.truncate(topk);
                    e
                })
                .collect();
            let routing = Routing::new(experts, topk, ids, vec![1.0; tokens * topk]).unwrap();
            let blocks = routing.sort(bm).unwrap().blocks();
            prop_assert!(blocks <= max_blocks(tokens * topk, experts, bm));
        }
    }

    #[test]
    fn max_blocks_is_reached() {
        // 5 experts, 5 pairs, one each: 5 blocks whatever the block size.
        for bm in [1, 16, 128] {
            assert_eq!(max_blocks(5, 5, bm), 5);
        }
        // 3 experts, 40 pairs in blocks of 16: at most 40 / 16 + 3 padded tails.
        assert_eq!(max_blocks(40, 3, 16), (40 + 3 * 15) / 16);
    }
}
