//! Status codes, their texts, and the detail of the last error of each status.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::fmt::Display;
use std::sync::Mutex;

use tilegen_hsa::sys::{self, Status};

/// Name and description of every status this library returns or reports.
const STATUSES: &[(Status, &str, &str)] = &[
    (
        sys::STATUS_SUCCESS,
        "HSA_STATUS_SUCCESS",
        "The function has been executed successfully.",
    ),
    (
        sys::STATUS_INFO_BREAK,
        "HSA_STATUS_INFO_BREAK",
        "A traversal over a list of elements has been interrupted by the application before completing.",
    ),
    (
        sys::STATUS_ERROR,
        "HSA_STATUS_ERROR",
        "A generic error has occurred.",
    ),
    (
        sys::STATUS_ERROR_INVALID_ARGUMENT,
        "HSA_STATUS_ERROR_INVALID_ARGUMENT",
        "One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument.",
    ),
    (
        sys::STATUS_ERROR_INVALID_QUEUE_CREATION,
        "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
        "The requested queue creation is not valid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_ALLOCATION,
        "HSA_STATUS_ERROR_INVALID_ALLOCATION",
        "The requested allocation is not valid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_AGENT,
        "HSA_STATUS_ERROR_INVALID_AGENT",
        "The agent is invalid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_SIGNAL,
        "HSA_STATUS_ERROR_INVALID_SIGNAL",
        "The signal is invalid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_QUEUE,
        "HSA_STATUS_ERROR_INVALID_QUEUE",
        "The queue is invalid.",
    ),
    (
        sys::STATUS_ERROR_OUT_OF_RESOURCES,
        "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
        "The runtime failed to allocate the necessary resources.",
    ),
    (
        sys::STATUS_ERROR_INVALID_PACKET_FORMAT,
        "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT",
        "The AQL packet is malformed.",
    ),
    (
        sys::STATUS_ERROR_NOT_INITIALIZED,
        "HSA_STATUS_ERROR_NOT_INITIALIZED",
        "An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero.",
    ),
    (
        sys::STATUS_ERROR_INVALID_ISA,
        "HSA_STATUS_ERROR_INVALID_ISA",
        "The instruction set architecture is invalid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_CODE_OBJECT,
        "HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
        "The code object is invalid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_EXECUTABLE,
        "HSA_STATUS_ERROR_INVALID_EXECUTABLE",
        "The executable is invalid.",
    ),
    (
        sys::STATUS_ERROR_FROZEN_EXECUTABLE,
        "HSA_STATUS_ERROR_FROZEN_EXECUTABLE",
        "The executable is frozen.",
    ),
    (
        sys::STATUS_ERROR_INVALID_SYMBOL_NAME,
        "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME",
        "There is no symbol with the given name.",
    ),
    (
        sys::STATUS_ERROR_EXCEPTION,
        "HSA_STATUS_ERROR_EXCEPTION",
        "An operation resulted in a hardware exception.",
    ),
    (
        sys::STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL,
        "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL",
        "The executable symbol is invalid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER",
        "The code object reader is invalid.",
    ),
    (
        0x1005,
        "HSA_STATUS_ERROR_INVALID_REGION",
        "The region is invalid.",
    ),
    (
        0x100E,
        "HSA_STATUS_ERROR_INVALID_INDEX",
        "The index is invalid.",
    ),
    (
        0x1017,
        "HSA_STATUS_ERROR_INVALID_ISA_NAME",
        "The instruction set architecture name is invalid.",
    ),
    (
        0x1020,
        "HSA_STATUS_ERROR_INVALID_FILE",
        "The file descriptor is invalid.",
    ),
    (
        0x3000,
        "HSA_EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED",
        "Image format is not supported.",
    ),
    (
        0x3003,
        "HSA_EXT_STATUS_ERROR_SAMPLER_DESCRIPTOR_UNSUPPORTED",
        "Sampler descriptor is not supported or is invalid.",
    ),
    (
        sys::STATUS_ERROR_INVALID_MEMORY_POOL,
        "HSA_STATUS_ERROR_INVALID_MEMORY_POOL",
        "The memory pool is invalid.",
    ),
    (
        sys::STATUS_ERROR_MEMORY_APERTURE_VIOLATION,
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
        "The agent accessed memory beyond the maximum legal address.",
    ),
    (
        sys::STATUS_ERROR_ILLEGAL_INSTRUCTION,
        "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION",
        "The agent executed an invalid shader instruction.",
    ),
    (
        sys::STATUS_ERROR_MEMORY_FAULT,
        "HSA_STATUS_ERROR_MEMORY_FAULT",
        "The agent attempted to access an inaccessible address.",
    ),
];

/// The texts handed out by `hsa_status_string`: one per (status, detail), never freed, so a
/// pointer a caller holds stays valid whatever happens later.
static TEXTS: Mutex<Option<HashMap<Status, &'static CStr>>> = Mutex::new(None);

fn leak(text: String) -> &'static CStr {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    Box::leak(c.into_boxed_c_str())
}

fn base_text(status: Status) -> Option<String> {
    STATUSES
        .iter()
        .find(|s| s.0 == status)
        .map(|(_, name, what)| format!("{name}: {what}"))
}

/// Records why `status` is being returned (what `hsa_status_string` says from now on) and
/// returns it.
pub(crate) fn fail(status: Status, detail: impl Display) -> Status {
    let text = match base_text(status) {
        Some(base) => format!("{base} (tilegen gfx950 emulator: {detail})"),
        None => format!("HSA status {status:#x} (tilegen gfx950 emulator: {detail})"),
    };
    let mut texts = TEXTS.lock().unwrap_or_else(|p| p.into_inner());
    texts
        .get_or_insert_with(HashMap::new)
        .insert(status, leak(text));
    status
}

/// The text for `status`: the detail of its last occurrence, else its description.
pub(crate) fn text(status: Status) -> Option<*const c_char> {
    let mut texts = TEXTS.lock().unwrap_or_else(|p| p.into_inner());
    let texts = texts.get_or_insert_with(HashMap::new);
    if let Some(t) = texts.get(&status) {
        return Some(t.as_ptr());
    }
    let t = leak(base_text(status)?);
    texts.insert(status, t);
    Some(t.as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(status: Status) -> String {
        let p = text(status).unwrap();
        // SAFETY: texts are NUL-terminated and never freed.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_status_text_carries_the_detail_of_its_last_occurrence() {
        assert!(
            read(sys::STATUS_ERROR_INVALID_QUEUE).starts_with("HSA_STATUS_ERROR_INVALID_QUEUE: ")
        );
        assert_eq!(
            fail(sys::STATUS_ERROR_INVALID_QUEUE, "queue 0x10"),
            sys::STATUS_ERROR_INVALID_QUEUE
        );
        assert!(
            read(sys::STATUS_ERROR_INVALID_QUEUE)
                .ends_with("(tilegen gfx950 emulator: queue 0x10)")
        );
        assert!(text(0x7777).is_none());
    }
}
