//! `PagedRowIndices` on the device: the same code, instantiated over the builder's `Int`, reads
//! a block table through a buffer and must give every row and every K/V copy source the host
//! instantiation gives (which the unit tests hold against the definition).

use tilegen_dsl::{
    CachePolicy, CompileOptions, Context, Kernel, KernelAttrs, Signature, Value, compile,
};
use tilegen_kernels::paged::{PagedRowIndices, PagedTile, PairRole};
use tilegen_runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

/// Logical page `i` of the sequence lives in physical page `TABLE[i]`.
const TABLE: [i32; 12] = [9, 3, 11, 0, 7, 5, 10, 1, 8, 2, 6, 4];

/// Everything a tile yields, flattened: the row of every offset, then the K copies' and the V
/// copies' (two slots) source rows.
fn expected(tile: PagedTile, kv_row: i64) -> Vec<i64> {
    let idx = PagedRowIndices::populate(tile, &kv_row, |i: &i64| {
        Ok::<_, ()>(i64::from(TABLE[*i as usize]))
    })
    .unwrap();
    let mut out: Vec<i64> = (0..tile.bn() as i64)
        .map(|o| idx.get_row(o).unwrap())
        .collect();
    out.extend(idx.k_copies(None).unwrap().iter().map(|c| c.src_row));
    for s in 0..2 {
        out.extend(idx.v_copies(2, s, None).unwrap().iter().map(|c| c.src_row));
    }
    out
}

/// The same on the emulator, `kv_row` a kernel argument (a run-time value).
fn on_device(tile: PagedTile, first_row: i64) -> Vec<i64> {
    let ctx = Context::create();
    let mut sig = Signature::new();
    let (p_out, p_table, p_row) = (
        sig.global_ptr("out"),
        sig.global_ptr("table"),
        sig.i32("kv_row"),
    );
    let attrs = KernelAttrs {
        workgroup_size: 64,
        waves_per_eu: None,
    };
    let k = Kernel::new(&ctx, "paged", &sig, attrs).unwrap();
    let table = k
        .buffer(
            k.ptr_arg(p_table).unwrap(),
            k.i32(TABLE.len() as i64 * 4),
            CachePolicy::Always,
        )
        .unwrap();
    let out = k
        .buffer(k.ptr_arg(p_out).unwrap(), k.i32(4096), CachePolicy::Always)
        .unwrap();
    let kv_row = k.i32_arg(p_row).unwrap();
    let idx = PagedRowIndices::populate(tile, &kv_row, |page| {
        k.buffer_load(&table, k.i32(0), *page * 4, 1)?.int(&k)
    })
    .unwrap();
    let mut values = (0..tile.bn() as i64)
        .map(|o| idx.get_row(o).unwrap())
        .collect::<Vec<_>>();
    values.extend(idx.k_copies(None).unwrap().into_iter().map(|c| c.src_row));
    for s in 0..2 {
        values.extend(
            idx.v_copies(2, s, None)
                .unwrap()
                .into_iter()
                .map(|c| c.src_row),
        );
    }
    for (i, v) in values.iter().enumerate() {
        k.buffer_store(&out, Value::from(*v), k.i32(0), k.i32(i as i64 * 4))
            .unwrap();
    }
    k.finish().unwrap();
    let built = compile(&k, CompileOptions::default()).unwrap();

    let dev = EmuDevice::new();
    let module = dev.load(&built.code_object).unwrap();
    let table_bytes: Vec<u8> = TABLE.iter().flat_map(|v| v.to_le_bytes()).collect();
    let table_ptr = dev.alloc(table_bytes.len() as u64).unwrap();
    dev.copy_to_device(table_ptr, &table_bytes).unwrap();
    let out_ptr = dev.alloc(4096).unwrap();
    let args = [
        ArgValue::Ptr(out_ptr),
        ArgValue::Ptr(table_ptr),
        ArgValue::I32(first_row as i32),
    ];
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
    };
    launch(&dev, &module, "paged", &config, &args).unwrap();
    let mut raw = vec![0u8; values.len() * 4];
    dev.copy_from_device(out_ptr, &mut raw).unwrap();
    raw.chunks(4)
        .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
        .collect()
}

#[test]
fn device_rows_equal_host_rows() {
    for (bn, page, pair, kv_row) in [
        (64, 16, None, 64),
        (64, 16, Some(PairRole::Peer), 128),
        (64, 16, Some(PairRole::Leader), 0),
        (32, 64, Some(PairRole::Peer), 96),
        (64, 0, None, 40),
        (128, 32, Some(PairRole::Peer), 128),
        (16, 16, None, 176),
    ] {
        let tile = PagedTile::new(bn, page).unwrap();
        let tile = match pair {
            Some(role) => tile.paired(role).unwrap(),
            None => tile,
        };
        assert_eq!(
            on_device(tile, kv_row),
            expected(tile, kv_row),
            "bn {bn} page {page} {pair:?} kv_row {kv_row}"
        );
    }
}
