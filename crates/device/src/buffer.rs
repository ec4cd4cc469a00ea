//! [`Buffer`]: device memory that is freed when it goes out of scope, on every path.

use crate::{Device, DevicePtr, RuntimeError};

/// An allocation on a device, freed on drop (errors included: a failed upload, a failed
/// launch, a panic). [`Buffer::free`] frees it explicitly and reports a failure.
pub struct Buffer<'d> {
    device: &'d dyn Device,
    ptr: DevicePtr,
    len: u64,
    live: bool,
}

impl<'d> Buffer<'d> {
    /// `len` zeroed bytes (at least one) on `device`.
    pub fn new(device: &'d dyn Device, len: u64) -> Result<Buffer<'d>, RuntimeError> {
        let ptr = device.alloc(len.max(1))?;
        Ok(Buffer {
            device,
            ptr,
            len,
            live: true,
        })
    }

    /// `len` zeroed bytes (at least one) from [`Device::alloc_lazy`]: for large buffers a
    /// launch reads only in part.
    pub fn new_lazy(device: &'d dyn Device, len: u64) -> Result<Buffer<'d>, RuntimeError> {
        let ptr = device.alloc_lazy(len.max(1))?;
        Ok(Buffer {
            device,
            ptr,
            len,
            live: true,
        })
    }

    /// A buffer holding `bytes` (freed again if the copy fails).
    pub fn upload(device: &'d dyn Device, bytes: &[u8]) -> Result<Buffer<'d>, RuntimeError> {
        let b = Buffer::new(device, bytes.len() as u64)?;
        b.write(0, bytes)?;
        Ok(b)
    }

    /// The device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Bytes asked for.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether zero bytes were asked for (one is allocated all the same).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: u64, n: usize) -> Result<DevicePtr, RuntimeError> {
        match offset.checked_add(n as u64) {
            Some(end) if end <= self.len => Ok(DevicePtr(self.ptr.0 + offset)),
            _ => Err(RuntimeError::Memory {
                address: self.ptr.0.saturating_add(offset),
                source: format!(
                    "{n} bytes at offset {offset} run past the end of a {}-byte buffer",
                    self.len
                )
                .into(),
            }),
        }
    }

    /// Copies `bytes` into the buffer at `offset`.
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), RuntimeError> {
        let at = self.check(offset, bytes.len())?;
        self.device.copy_to_device(at, bytes)
    }

    /// Copies the buffer's bytes from `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), RuntimeError> {
        let at = self.check(offset, out.len())?;
        self.device.copy_from_device(at, out)
    }

    /// The whole buffer.
    pub fn to_vec(&self) -> Result<Vec<u8>, RuntimeError> {
        let len = usize::try_from(self.len).map_err(|_| RuntimeError::Memory {
            address: self.ptr.0,
            source: format!("{} bytes do not fit in host memory", self.len).into(),
        })?;
        let mut v = vec![0u8; len];
        self.read(0, &mut v)?;
        Ok(v)
    }

    /// Frees the buffer now, reporting a failure (dropping it frees it silently).
    pub fn free(mut self) -> Result<(), RuntimeError> {
        self.live = false;
        self.device.free(self.ptr)
    }
}

impl std::fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("ptr", &format_args!("{:#x}", self.ptr.0))
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        if self.live {
            // Nothing to report to from a destructor; `free` reports.
            let _ = self.device.free(self.ptr);
        }
    }
}
