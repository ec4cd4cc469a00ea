//! Builds one spec and writes its listing, IR and code object to a directory (a debugging aid).
fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/tmp/kt".into());
    let spec = match std::env::args().nth(2).as_deref() {
        Some("lds") => tilegen_kernels::KernelSpec::lds(),
        Some("bpf") => tilegen_kernels::KernelSpec::new().b_prefetch(true),
        Some("all") => tilegen_kernels::KernelSpec::new()
            .b_prefetch(true)
            .dram_to_lds(true)
            .cluster_drain_sched(true)
            .deep_prime(true),
        _ => tilegen_kernels::KernelSpec::new(),
    };
    match spec.build() {
        Ok(k) => {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(format!("{dir}/kernel.s"), &k.asm).unwrap();
            std::fs::write(format!("{dir}/kernel.ll"), &k.ir).unwrap();
            std::fs::write(format!("{dir}/kernel.hsaco"), &k.code_object).unwrap();
            println!("{:#?}\n{:?}", k.report, k.timings);
        }
        Err(e) => eprintln!("error: {e}"),
    }
}
