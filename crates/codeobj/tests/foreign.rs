//! The reader against code objects another compiler built (Triton), checked field by field
//! against that compiler's own listing (`kernel.s` directives) and `llvm-readelf-22`.

use std::process::Command;

use tilegen_codeobj::{CodeObject, CodeObjectError, CodeObjectVersion};

/// `.amdhsa_<key> <value>` from a compiler listing.
fn directive(asm: &str, key: &str) -> u64 {
    let pat = format!(".amdhsa_{key} ");
    asm.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&pat)
                .map(|v| v.trim().parse().expect("integer directive"))
        })
        .unwrap_or_else(|| panic!("no .amdhsa_{key} in the listing"))
}

/// `.<key>: <value>` of the metadata as llvm-readelf prints it.
fn readelf_meta(notes: &str, key: &str) -> u64 {
    let pat = format!(".{key}:");
    notes
        .lines()
        .find_map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .strip_prefix(&pat)
                .map(|v| v.trim().parse().expect("integer"))
        })
        .unwrap_or_else(|| panic!("llvm-readelf shows no .{key}"))
}

#[test]
fn triton_code_objects_parse_exactly() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    for fk in corpus {
        let bytes = std::fs::read(&fk.hsaco).unwrap();
        let co = CodeObject::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", fk.name()));
        let hdr = Command::new("llvm-readelf-22")
            .arg("-h")
            .arg(&fk.hsaco)
            .output()
            .expect("llvm-readelf-22");
        let abi = String::from_utf8_lossy(&hdr.stdout)
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("ABI Version:")
                    .map(|v| v.trim().to_string())
            })
            .expect("ABI Version line");
        let want = if abi == "3" {
            CodeObjectVersion::V5
        } else {
            CodeObjectVersion::V6
        };
        assert_eq!(co.version, want, "{}: ABI version {abi}", fk.name());
        assert_eq!(co.kernels.len(), 1);
        let k = &co.kernels[0];
        let asm = std::fs::read_to_string(&fk.asm).unwrap();
        let d = &k.descriptor;
        assert_eq!(
            d.user_sgpr_count() as u64,
            directive(&asm, "user_sgpr_count"),
            "{}",
            fk.name()
        );
        assert_eq!(
            d.group_segment_fixed_size as u64,
            directive(&asm, "group_segment_fixed_size")
        );
        assert_eq!(
            d.private_segment_fixed_size as u64,
            directive(&asm, "private_segment_fixed_size")
        );
        assert_eq!(d.kernarg_size as u64, directive(&asm, "kernarg_size"));
        assert_eq!(d.accum_offset() as u64, directive(&asm, "accum_offset"));
        assert_eq!(
            d.kernarg_preload_length() as u64,
            directive(&asm, "user_sgpr_kernarg_preload_length")
        );
        assert_eq!(
            d.kernarg_preload_offset() as u64,
            directive(&asm, "user_sgpr_kernarg_preload_offset")
        );
        assert_eq!(
            d.workitem_id_vgprs() as u64,
            directive(&asm, "system_vgpr_workitem_id")
        );
        assert_eq!(
            d.enable_workgroup_id_x() as u64,
            directive(&asm, "system_sgpr_workgroup_id_x")
        );
        assert_eq!(
            d.enable_workgroup_id_y() as u64,
            directive(&asm, "system_sgpr_workgroup_id_y")
        );
        assert_eq!(
            d.enable_workgroup_id_z() as u64,
            directive(&asm, "system_sgpr_workgroup_id_z")
        );
        assert_eq!(
            d.enable_sgpr_dispatch_ptr() as u64,
            directive(&asm, "user_sgpr_dispatch_ptr")
        );
        assert_eq!(
            d.enable_sgpr_queue_ptr() as u64,
            directive(&asm, "user_sgpr_queue_ptr")
        );
        assert_eq!(
            d.enable_sgpr_kernarg_segment_ptr() as u64,
            directive(&asm, "user_sgpr_kernarg_segment_ptr")
        );
        assert_eq!(
            d.enable_sgpr_dispatch_id() as u64,
            directive(&asm, "user_sgpr_dispatch_id")
        );
        assert_eq!(
            d.enable_sgpr_private_segment_size() as u64,
            directive(&asm, "user_sgpr_private_segment_size")
        );
        assert_eq!(
            d.enable_workgroup_info() as u64,
            directive(&asm, "system_sgpr_workgroup_info")
        );
        assert_eq!(
            d.uses_dynamic_stack() as u64,
            directive(&asm, "uses_dynamic_stack")
        );
        // next_free_vgpr counts arch VGPRs and AGPRs of the unified file, granule 8.
        assert_eq!(
            d.allocated_vgprs() as u64,
            directive(&asm, "next_free_vgpr").div_ceil(8) * 8
        );
        assert_eq!(
            d.enable_private_segment() as u64,
            directive(&asm, "enable_private_segment")
        );
        // Metadata against llvm-readelf's rendering of the same note.
        let out = Command::new("llvm-readelf-22")
            .arg("--notes")
            .arg(&fk.hsaco)
            .output()
            .expect("llvm-readelf-22");
        let notes = String::from_utf8_lossy(&out.stdout);
        let m = &k.meta;
        for (key, ours) in [
            ("vgpr_count", m.vgpr_count),
            ("agpr_count", m.agpr_count),
            ("sgpr_count", m.sgpr_count),
            ("kernarg_segment_size", m.kernarg_segment_size),
            ("group_segment_fixed_size", m.group_segment_fixed_size),
            ("max_flat_workgroup_size", m.max_flat_workgroup_size),
            ("wavefront_size", m.wavefront_size),
        ] {
            assert_eq!(
                ours as u64,
                readelf_meta(&notes, key),
                "{} .{key}",
                fk.name()
            );
        }
        assert_eq!(m.args.len(), notes.matches(".value_kind:").count());
        assert_eq!(m.name, fk.meta["kernel"].as_str().unwrap());
        assert_eq!(
            m.explicit_args().count(),
            15,
            "13 Triton parameters + 2 scratch pointers"
        );
        // The entry is the kernel's function symbol and lies in .text.
        let (text_addr, text) = &co.text;
        assert!(k.entry >= *text_addr && k.entry < text_addr + text.len() as u64);
        assert!(k.code_size > 0);
    }
}

#[test]
fn malformed_and_foreign_files_are_named_errors() {
    assert_eq!(
        CodeObject::parse(b"\x7fELF garbage").unwrap_err(),
        CodeObjectError::TooShort { len: 12 }
    );
    assert_eq!(
        CodeObject::parse(&[]).unwrap_err(),
        CodeObjectError::TooShort { len: 0 }
    );
    // A host executable is an ELF, but not an AMDGPU one.
    let host = std::fs::read("/bin/true").unwrap();
    assert!(matches!(
        CodeObject::parse(&host),
        Err(CodeObjectError::WrongMachine { .. })
    ));
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let good = std::fs::read(&corpus[0].hsaco).unwrap();
    // Another processor: gfx942 in e_flags.
    let mut other = good.clone();
    other[48] = 0x4c;
    assert!(matches!(
        CodeObject::parse(&other),
        Err(CodeObjectError::WrongProcessor {
            mach: 0x4c,
            name: "gfx942"
        })
    ));
    // An unsupported code object version.
    let mut v2 = good.clone();
    v2[8] = 1;
    assert_eq!(
        CodeObject::parse(&v2).unwrap_err(),
        CodeObjectError::Version(1)
    );
    // Every truncation is an error, never a panic.
    for len in (0..good.len()).step_by(97) {
        assert!(
            CodeObject::parse(&good[..len]).is_err(),
            "truncated to {len} bytes parsed"
        );
    }
}
