//! Damaged code objects the reader must refuse with a typed error, not an allocation many times
//! the file's size.

use tilegen_codeobj::{CodeObject, CodeObjectError};

/// Every program header rewritten as a PT_LOAD of the whole file: copying them would take
/// (headers x file size) bytes, so the reader refuses overlapping segments.
#[test]
fn overlapping_load_segments_are_refused() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let mut b = std::fs::read(&corpus[0].hsaco).unwrap();
    let len = b.len() as u64;
    let phoff = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes([b[56], b[57]]) as usize;
    assert!(phnum >= 3);
    for i in 0..phnum {
        let ph = phoff + 56 * i;
        b[ph..ph + 4].copy_from_slice(&1u32.to_le_bytes());
        b[ph + 8..ph + 16].copy_from_slice(&0u64.to_le_bytes());
        b[ph + 32..ph + 40].copy_from_slice(&len.to_le_bytes());
        b[ph + 40..ph + 48].copy_from_slice(&len.to_le_bytes());
    }
    match CodeObject::parse(&b) {
        Err(CodeObjectError::Elf(m)) => assert!(m.contains("overlap"), "{m}"),
        r => panic!("unexpected {:?}", r.map(|_| ())),
    }
}

/// Truncated at every offset, the reader returns an error (never panics).
#[test]
fn every_truncation_is_an_error() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let b = std::fs::read(&corpus[0].hsaco).unwrap();
    for cut in 0..b.len() {
        assert!(CodeObject::parse(&b[..cut]).is_err(), "truncated to {cut}");
    }
}
