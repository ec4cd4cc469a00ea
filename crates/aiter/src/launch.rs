//! A device-independent description of one launch: what a timing model (or any other consumer
//! that allocates its own memory) needs to run a table row's kernel.

use std::path::{Path, PathBuf};

use crate::kernargs::{BufferSpec, GemmLaunch, GemmPointers, KERNARG_BYTES};

/// The full launch of a kernel on a problem: code object, symbol, grid, block, dynamic LDS, and
/// the argument block with its pointer fields left for [`bind`](Self::bind) to fill with the
/// addresses of buffers described by size. The buffers may be zeroed memory: the kernels'
/// control flow does not depend on the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchDescription {
    code_object: PathBuf,
    symbol: String,
    grid: [u32; 3],
    block: [u32; 3],
    dynamic_lds: u32,
    launch: GemmLaunch,
}

/// [`LaunchDescription::bind`] got the wrong number of addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the launch has {expected} buffers, got {actual} addresses")]
pub struct BindError {
    /// Buffers of the launch.
    pub expected: usize,
    /// Addresses given.
    pub actual: usize,
}

impl LaunchDescription {
    /// Describes `launch`.
    pub fn new(launch: &GemmLaunch) -> Self {
        LaunchDescription {
            code_object: launch.kernel().path().to_path_buf(),
            symbol: launch.kernel().symbol().to_string(),
            grid: launch.grid(),
            block: launch.block(),
            // The kernels declare all their LDS statically (metadata `group_segment_fixed_size`).
            dynamic_lds: 0,
            launch: launch.clone(),
        }
    }

    /// The code object file.
    pub fn code_object(&self) -> &Path {
        &self.code_object
    }

    /// The kernel symbol (its metadata name).
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// Workgroups per dimension.
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }

    /// Work-items per workgroup.
    pub fn block(&self) -> [u32; 3] {
        self.block
    }

    /// LDS bytes added at launch to the kernel's static LDS.
    pub fn dynamic_lds(&self) -> u32 {
        self.dynamic_lds
    }

    /// The launch this describes.
    pub fn launch(&self) -> &GemmLaunch {
        &self.launch
    }

    /// The buffers to allocate, in the order [`bind`](Self::bind) takes their addresses.
    pub fn buffers(&self) -> Vec<BufferSpec> {
        self.launch.buffers()
    }

    /// The argument block with every pointer null.
    pub fn kernargs_unbound(&self) -> [u8; KERNARG_BYTES] {
        self.launch.kernargs(&GemmPointers::default())
    }

    /// The argument block with the buffers of [`buffers`](Self::buffers) at `addresses`
    /// (same order).
    pub fn bind(&self, addresses: &[u64]) -> Result<[u8; KERNARG_BYTES], BindError> {
        let buffers = self.buffers();
        if addresses.len() != buffers.len() {
            return Err(BindError {
                expected: buffers.len(),
                actual: addresses.len(),
            });
        }
        let mut ptrs = GemmPointers::default();
        for (spec, &addr) in buffers.iter().zip(addresses) {
            let slot = match spec.field() {
                crate::Field::D => &mut ptrs.d,
                crate::Field::A => &mut ptrs.a,
                crate::Field::B => &mut ptrs.b,
                crate::Field::ScaleA => &mut ptrs.scale_a,
                crate::Field::ScaleB => &mut ptrs.scale_b,
                // `buffers` lists only the fields above.
                _ => continue,
            };
            *slot = addr;
        }
        Ok(self.launch.kernargs(&ptrs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernargs::{Field, GemmProblem};
    use crate::kernel::tests::kernel;

    #[test]
    fn describes_and_binds() {
        let k = kernel(128, 512, true);
        let p = GemmProblem::new(100, 1024, 1024)
            .unwrap()
            .with_log2_k_split(2)
            .unwrap();
        let l = GemmLaunch::new(&k, p).unwrap();
        let d = LaunchDescription::new(&l);
        assert_eq!(d.grid(), [2, 1, 4]);
        assert_eq!(d.block(), [256, 1, 1]);
        assert_eq!(d.dynamic_lds(), 0);
        assert_eq!(d.symbol(), k.symbol());
        assert_eq!(d.code_object(), k.path());
        let fields: Vec<Field> = d.buffers().iter().map(|b| b.field()).collect();
        assert_eq!(
            fields,
            [Field::D, Field::A, Field::B, Field::ScaleA, Field::ScaleB]
        );
        let bound = d.bind(&[1, 2, 3, 4, 5]).unwrap();
        let ptrs = GemmPointers {
            d: 1,
            a: 2,
            b: 3,
            scale_a: 4,
            scale_b: 5,
        };
        assert_eq!(bound, l.kernargs(&ptrs));
        assert_eq!(d.kernargs_unbound(), l.kernargs(&GemmPointers::default()));
        assert_eq!(
            d.bind(&[1, 2]),
            Err(BindError {
                expected: 5,
                actual: 2
            })
        );
    }
}
