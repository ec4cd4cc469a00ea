//! `PagedRowIndices`: the physical rows of one BN-row tile of a paged KV cache, computed once
//! per tile from the block table and reused by the K and V copies.
//!
//! A paged cache stores a sequence's KV rows in pages of `page_size` rows scattered over the
//! cache (`block_table[seq][page]` names the physical page). A tile of `BN` logical rows starting
//! at a page-aligned `kv_row` spans `num_pages = BN / eff_page` pieces, where `eff_page` is the
//! page size, or `BN` when a page holds the whole tile (`page_size >= BN`) or the cache is not
//! paged (`page_size == 0`): then a single entry is kept, and the tile costs one lookup.
//!
//! One implementation serves the host (`i64`) and the device (`Int`, loads from the block table
//! through a buffer) because it is generic over the layout algebra's [`IndexValue`].
//!
//! # On gfx950
//! The seed this follows issues TMA copies and may split a tile between the two CTAs of a pair.
//! gfx950 has neither: each copy here is a run of `rows` consecutive cache rows moved to LDS with
//! LDS-DMA loads (`buffer_load ... lds`, one row slice per lane group), and the pair is the two
//! halves of a workgroup's waves: the leader half (waves `0 .. W/2`) stages the first `BN/2` rows
//! of K, the peer half the rest, while V (needed whole by every wave for P·V) is staged from all
//! entries. Under the pair split K covers `num_pages / 2` entries per half when `num_pages >= 2`;
//! with a single entry the peer reuses it and starts `BN/2` rows further into the page.

use tilegen_layout::IndexValue;

/// Why a paged-tile geometry or a copy request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PagedError {
    /// BN must be positive.
    #[error("BN = {bn} must be positive")]
    EmptyTile {
        /// Rows per tile.
        bn: u32,
    },
    /// Pages and tiles must nest: a page smaller than the tile divides it, a larger one is a
    /// multiple of it (so a tile never straddles two pages).
    #[error("page_size = {page_size} and BN = {bn} must nest (one divides the other)")]
    NotNested {
        /// Rows per page.
        page_size: u32,
        /// Rows per tile.
        bn: u32,
    },
    /// The pair split halves the tile's rows and, with several entries, its entries.
    #[error(
        "the pair split needs an even BN ({bn}) and, with several pages, an even page count ({num_pages})"
    )]
    Unpairable {
        /// Rows per tile.
        bn: u32,
        /// Entries of the tile.
        num_pages: u32,
    },
    /// V sub-tiles split the tile evenly, and their pages evenly when there are several.
    #[error(
        "{sub_tiles} V sub-tiles (index {index}) must divide BN = {bn} and, with several pages, the {num_pages} pages"
    )]
    BadSubTiles {
        /// Sub-tiles requested.
        sub_tiles: u32,
        /// Sub-tile index requested.
        index: u32,
        /// Rows per tile.
        bn: u32,
        /// Entries of the tile.
        num_pages: u32,
    },
    /// A partial copy issues between 1 and the full count of copies.
    #[error("{valid} valid pages: a partial copy issues 1 to {max}")]
    BadPartial {
        /// Valid pages requested.
        valid: u32,
        /// The full count.
        max: u32,
    },
    /// An offset outside the tile.
    #[error("row offset {offset} is outside the {bn}-row tile")]
    OffsetOutside {
        /// The offset.
        offset: i64,
        /// Rows per tile.
        bn: u32,
    },
}

/// Which half of a pair stages K (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PairRole {
    /// The first half of the rows.
    Leader,
    /// The second half of the rows.
    Peer,
}

/// The shape of a paged tile: `BN` rows over pages of `page_size` rows (0: not paged),
/// optionally split between a pair. Validated on construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PagedTile {
    bn: u32,
    page_size: u32,
    pair: Option<PairRole>,
}

impl PagedTile {
    /// A tile of `bn` rows over pages of `page_size` rows (`0`: a contiguous, non-paged cache).
    pub fn new(bn: u32, page_size: u32) -> Result<Self, PagedError> {
        if bn == 0 {
            return Err(PagedError::EmptyTile { bn });
        }
        let nested = page_size == 0
            || (page_size < bn && bn.is_multiple_of(page_size))
            || (page_size >= bn && page_size.is_multiple_of(bn));
        if !nested {
            return Err(PagedError::NotNested { page_size, bn });
        }
        Ok(PagedTile {
            bn,
            page_size,
            pair: None,
        })
    }

    /// The same tile with K split between a pair, this member playing `role`.
    pub fn paired(self, role: PairRole) -> Result<Self, PagedError> {
        let num_pages = self.num_pages();
        if !self.bn.is_multiple_of(2) || (num_pages >= 2 && !num_pages.is_multiple_of(2)) {
            return Err(PagedError::Unpairable {
                bn: self.bn,
                num_pages,
            });
        }
        Ok(PagedTile {
            pair: Some(role),
            ..self
        })
    }

    /// Rows per tile.
    pub fn bn(&self) -> u32 {
        self.bn
    }

    /// Rows per page (0: not paged).
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// The pair role, if K is split.
    pub fn pair(&self) -> Option<PairRole> {
        self.pair
    }

    /// Rows one entry covers: the page size, or BN when a page holds the tile or the cache is
    /// not paged.
    pub fn eff_page(&self) -> u32 {
        sub_tile_rows(self.bn, self.page_size)
    }

    /// Entries of the tile: `BN / eff_page`.
    pub fn num_pages(&self) -> u32 {
        self.bn / self.eff_page()
    }

    /// K copies this member issues when all are valid: every entry, or half of them under the
    /// pair split (the single entry when there is one).
    pub fn k_pages(&self) -> u32 {
        match (self.pair, self.num_pages()) {
            (Some(_), n) if n >= 2 => n / 2,
            (_, n) => n,
        }
    }
}

/// Rows one copy of a `rows`-row range covers over pages of `page_size` rows.
fn sub_tile_rows(rows: u32, page_size: u32) -> u32 {
    if page_size == 0 || page_size >= rows {
        rows
    } else {
        page_size
    }
}

/// One copy: `rows` consecutive cache rows starting at physical row `src_row`, to tile row
/// `dst_row` of the LDS slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCopy<T> {
    /// First physical cache row.
    pub src_row: T,
    /// First row in the destination slot.
    pub dst_row: u32,
    /// Rows copied.
    pub rows: u32,
}

/// The physical rows of one tile (see the module doc), one entry per page piece.
#[derive(Debug, Clone)]
pub struct PagedRowIndices<T> {
    tile: PagedTile,
    rows: Vec<T>,
}

impl<T: IndexValue> PagedRowIndices<T> {
    /// Looks the tile's pages up: `kv_row` is the tile's first logical row (page-aligned when
    /// pages are smaller than the tile, a multiple of BN otherwise), `page_of(i)` the physical
    /// page of the sequence's logical page `i` (a block-table read).
    pub fn populate<E>(
        tile: PagedTile,
        kv_row: &T,
        mut page_of: impl FnMut(&T) -> Result<T, E>,
    ) -> Result<Self, E> {
        let rows = (0..tile.num_pages())
            .map(|p| {
                let logical = kv_row.add(&kv_row.constant_like(i64::from(p * tile.eff_page())));
                if tile.page_size == 0 {
                    return Ok(logical);
                }
                let size = kv_row.constant_like(i64::from(tile.page_size));
                let page = page_of(&logical.div(&size))?;
                Ok(page.mul(&size).add(&logical.rem(&size)))
            })
            .collect::<Result<_, E>>()?;
        Ok(PagedRowIndices { tile, rows })
    }

    /// The tile's geometry.
    pub fn tile(&self) -> &PagedTile {
        &self.tile
    }

    /// The entries: the physical row of each page piece's first row.
    pub fn rows(&self) -> &[T] {
        &self.rows
    }

    /// The physical row of logical row `offset` of the tile.
    pub fn get_row(&self, offset: i64) -> Result<T, PagedError> {
        let bn = self.tile.bn;
        if !(0..i64::from(bn)).contains(&offset) {
            return Err(PagedError::OffsetOutside { offset, bn });
        }
        let eff = i64::from(self.tile.eff_page());
        let entry = &self.rows[(offset / eff) as usize];
        Ok(entry.add(&entry.constant_like(offset % eff)))
    }

    /// The K copies of this member. `valid` (the needs-partial form) issues exactly that many,
    /// 1 to [`PagedTile::k_pages`]; `None` issues all. Under the pair split the peer shifts its
    /// entries by `num_pages / 2`, or, with a single entry, starts `BN/2` rows into it; its
    /// copies fill the first slots of its own half-tile.
    pub fn k_copies(&self, valid: Option<u32>) -> Result<Vec<RowCopy<T>>, PagedError> {
        let t = &self.tile;
        let per = t.k_pages();
        let n = partial(valid, per)?;
        let single = t.num_pages() == 1;
        let (first, extra, rows) = match (t.pair, single) {
            (None, _) => (0, 0, t.eff_page()),
            (Some(PairRole::Leader), true) => (0, 0, t.bn / 2),
            (Some(PairRole::Peer), true) => (0, t.bn / 2, t.bn / 2),
            (Some(PairRole::Leader), false) => (0, 0, t.eff_page()),
            (Some(PairRole::Peer), false) => (t.num_pages() / 2, 0, t.eff_page()),
        };
        Ok((0..n)
            .map(|p| {
                let entry = &self.rows[(first + p) as usize];
                RowCopy {
                    src_row: entry.add(&entry.constant_like(i64::from(extra))),
                    dst_row: p * rows,
                    rows,
                }
            })
            .collect())
    }

    /// The V copies of sub-tile `index` of `sub_tiles` (V split over that many LDS slots of
    /// `BN / sub_tiles` rows; `(1, 0)` is the whole tile). `valid` as in [`Self::k_copies`],
    /// up to the sub-tile's page count. With several pages, sub-tile `s` takes its share of the
    /// entries; with a single page covering the tile, every sub-tile reads that entry at its own
    /// row offset.
    pub fn v_copies(
        &self,
        sub_tiles: u32,
        index: u32,
        valid: Option<u32>,
    ) -> Result<Vec<RowCopy<T>>, PagedError> {
        let t = &self.tile;
        let num_pages = t.num_pages();
        let bad = || PagedError::BadSubTiles {
            sub_tiles,
            index,
            bn: t.bn,
            num_pages,
        };
        if sub_tiles == 0 || index >= sub_tiles || !t.bn.is_multiple_of(sub_tiles) {
            return Err(bad());
        }
        let slot_rows = t.bn / sub_tiles;
        let rows = sub_tile_rows(slot_rows, t.page_size);
        if num_pages >= sub_tiles {
            if !num_pages.is_multiple_of(sub_tiles) {
                return Err(bad());
            }
            let per = num_pages / sub_tiles;
            let n = partial(valid, per)?;
            Ok((0..n)
                .map(|p| RowCopy {
                    src_row: self.rows[(index * per + p) as usize].clone(),
                    dst_row: p * rows,
                    rows,
                })
                .collect())
        } else if num_pages == 1 {
            partial(valid, 1)?;
            let entry = &self.rows[0];
            Ok(vec![RowCopy {
                src_row: entry.add(&entry.constant_like(i64::from(index * slot_rows))),
                dst_row: 0,
                rows: slot_rows,
            }])
        } else {
            Err(bad())
        }
    }
}

/// The number of copies of a (possibly partial) request of at most `max`.
fn partial(valid: Option<u32>, max: u32) -> Result<u32, PagedError> {
    match valid {
        None => Ok(max),
        Some(v) if (1..=max).contains(&v) => Ok(v),
        Some(v) => Err(PagedError::BadPartial { valid: v, max }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shuffled block table: logical page `i` lives in physical page `(7 i + 3) mod 97`.
    fn page_of(i: &i64) -> Result<i64, PagedError> {
        Ok((7 * i + 3) % 97)
    }

    /// The straightforward model: the physical row of every logical row, by the definition.
    fn physical(page_size: u32, kv_row: i64, offset: i64) -> i64 {
        let logical = kv_row + offset;
        if page_size == 0 {
            return logical;
        }
        let p = i64::from(page_size);
        page_of(&(logical / p)).unwrap() * p + logical % p
    }

    /// Rows a list of copies moves, as (slot row, physical row) pairs; each copy must stay in
    /// one page (its rows physically contiguous by the model).
    fn moved(copies: &[RowCopy<i64>]) -> Vec<(u32, i64)> {
        copies
            .iter()
            .flat_map(|c| (0..c.rows).map(move |r| (c.dst_row + r, c.src_row + i64::from(r))))
            .collect()
    }

    #[test]
    fn every_geometry_agrees_with_the_definition() {
        let mut checked = 0u64;
        for bn in 1..=256u32 {
            let divisors: Vec<u32> = (1..=bn).filter(|d| bn % d == 0).collect();
            // Every page size that nests with BN: none, each divisor, and multiples of BN.
            for page_size in [0, 2 * bn, 3 * bn]
                .into_iter()
                .chain(divisors.iter().copied())
            {
                let tile = PagedTile::new(bn, page_size).unwrap();
                let eff = tile.eff_page();
                assert_eq!(tile.num_pages(), bn / eff);
                assert_eq!(
                    tile.num_pages() == 1,
                    page_size == 0 || page_size >= bn,
                    "a single entry exactly when the page holds the tile"
                );
                // Tiles at page-aligned (and, for pages bigger than the tile, BN-aligned)
                // starts, including ones deep inside a big page.
                let step = i64::from(bn);
                for kv_row in (0..4)
                    .map(|i| i * step)
                    .chain([i64::from(page_size.max(1)) * 3])
                {
                    if page_size > bn && kv_row % i64::from(bn) != 0 {
                        continue;
                    }
                    let idx = PagedRowIndices::populate(tile, &kv_row, page_of).unwrap();
                    for o in 0..i64::from(bn) {
                        assert_eq!(
                            idx.get_row(o).unwrap(),
                            physical(page_size, kv_row, o),
                            "bn {bn} page {page_size} kv_row {kv_row} offset {o}"
                        );
                    }
                    assert!(idx.get_row(i64::from(bn)).is_err());
                    // K, unpaired: the whole tile, in order.
                    let all: Vec<_> = (0..bn)
                        .map(|r| (r, physical(page_size, kv_row, r.into())))
                        .collect();
                    assert_eq!(moved(&idx.k_copies(None).unwrap()), all);
                    // K under the pair split: each half its rows, packed from slot row 0.
                    let pairable =
                        bn % 2 == 0 && (tile.num_pages() < 2 || tile.num_pages().is_multiple_of(2));
                    assert_eq!(tile.paired(PairRole::Leader).is_ok(), pairable);
                    if pairable {
                        for (role, first) in [(PairRole::Leader, 0), (PairRole::Peer, bn / 2)] {
                            let paired = PagedRowIndices::populate(
                                tile.paired(role).unwrap(),
                                &kv_row,
                                page_of,
                            )
                            .unwrap();
                            let want: Vec<_> = (0..bn / 2)
                                .map(|r| (r, physical(page_size, kv_row, (first + r).into())))
                                .collect();
                            let copies = paired.k_copies(None).unwrap();
                            assert_eq!(copies.len() as u32, paired.tile().k_pages());
                            assert_eq!(moved(&copies), want, "{role:?} bn {bn} page {page_size}");
                            // Partial: exactly `v` copies, the first ones.
                            for v in 1..=paired.tile().k_pages() {
                                let part = paired.k_copies(Some(v)).unwrap();
                                assert_eq!(part.len() as u32, v);
                                assert_eq!(part[..], copies[..v as usize]);
                            }
                            assert!(paired.k_copies(Some(0)).is_err());
                            assert!(paired.k_copies(Some(paired.tile().k_pages() + 1)).is_err());
                        }
                    }
                    // V, split over every divisor of BN: slot s holds rows s*BN/S .. of the tile.
                    for &sub in &divisors {
                        for s in 0..sub {
                            let got = idx.v_copies(sub, s, None);
                            let pages = tile.num_pages();
                            if pages > 1 && (pages < sub || !pages.is_multiple_of(sub)) {
                                assert!(got.is_err(), "pages {pages} over {sub} slots");
                                continue;
                            }
                            let got = got.unwrap();
                            let slot = bn / sub;
                            let want: Vec<_> = (0..slot)
                                .map(|r| (r, physical(page_size, kv_row, (s * slot + r).into())))
                                .collect();
                            assert_eq!(moved(&got), want, "bn {bn} page {page_size} V {s}/{sub}");
                            for v in 1..=got.len() as u32 {
                                assert_eq!(
                                    idx.v_copies(sub, s, Some(v)).unwrap()[..],
                                    got[..v as usize]
                                );
                            }
                            assert!(idx.v_copies(sub, s, Some(got.len() as u32 + 1)).is_err());
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }

    #[test]
    fn refusals_name_the_rule() {
        assert_eq!(PagedTile::new(0, 16), Err(PagedError::EmptyTile { bn: 0 }));
        assert_eq!(
            PagedTile::new(64, 24),
            Err(PagedError::NotNested {
                page_size: 24,
                bn: 64
            })
        );
        assert_eq!(
            PagedTile::new(96, 64),
            Err(PagedError::NotNested {
                page_size: 64,
                bn: 96
            })
        );
        let three = PagedTile::new(48, 16).unwrap();
        assert_eq!(three.num_pages(), 3);
        assert!(matches!(
            three.paired(PairRole::Peer),
            Err(PagedError::Unpairable { num_pages: 3, .. })
        ));
        assert!(
            PagedTile::new(1, 0)
                .unwrap()
                .paired(PairRole::Leader)
                .is_err()
        );
    }
}
