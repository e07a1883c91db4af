//! Reading the log that the kernel's `log-writes` device-mapper target keeps.
//!
//! The target passes every bio to a data device and appends each completed write to a
//! second (log) device, in the order the data reached stable storage: plain writes are
//! held back until the next flush completes and are logged just before it, FUA writes are
//! logged as soon as they complete, and `dmsetup message DEV 0 mark TEXT` appends a mark
//! in line with them. Replaying the first N entries onto a copy of the data device's
//! initial contents gives a state the disk could really have been in at a power loss.
//!
//! The layout, all integers little-endian, in units of the data device's logical sector
//! (`sectorsize`, read from the super block):
//!
//! - sector 0, the super block: `magic: u64`, `version: u64`, `nr_entries: u64`,
//!   `sectorsize: u32`;
//! - then, per entry, one header sector (`sector: u64`, `nr_sectors: u64`, `flags: u64`,
//!   `data_len: u64`; a mark's text follows these 32 bytes in the same sector) and, unless
//!   the entry is a discard, `nr_sectors` sectors of the data written.
//!
//! Only what the super block counts is read: the target rewrites it after every FUA
//! write and every mark, and once more when the device is removed.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::Error;

/// The super block's magic number.
const MAGIC: u64 = 0x006a_7366_7773_6872;
/// The only format version there is.
const VERSION: u64 = 1;

/// The entry carries a cache flush: everything logged before it is on stable storage.
pub(crate) const FLUSH: u64 = 1 << 0;
/// The entry was written with FUA: it is on stable storage when it completes.
pub(crate) const FUA: u64 = 1 << 1;
/// The entry discards its range; no data follows it.
pub(crate) const DISCARD: u64 = 1 << 2;
/// The entry is a mark from userspace; its text follows its header.
pub(crate) const MARK: u64 = 1 << 3;

/// One logged operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Position in the log, from 0.
    pub(crate) index: u64,
    /// First sector written (in `sectorsize` units).
    pub(crate) sector: u64,
    /// Sectors written or discarded.
    pub(crate) nr_sectors: u64,
    pub(crate) flags: u64,
    /// The bytes written (empty for flushes, discards and marks).
    pub(crate) data: Vec<u8>,
    /// The text of a mark.
    pub(crate) mark: Option<String>,
}

impl Entry {
    /// True when the disk promises everything up to here survives a power loss.
    pub(crate) fn is_flush_point(&self) -> bool {
        self.flags & (FLUSH | FUA) != 0
    }

    /// True when the entry changes the device's contents.
    pub(crate) fn changes_data(&self) -> bool {
        self.flags & DISCARD != 0 || !self.data.is_empty()
    }
}

/// An open log, read entry by entry.
#[derive(Debug)]
pub(crate) struct Log<R> {
    reader: R,
    /// Bytes per sector of the data device.
    pub(crate) sectorsize: u64,
    /// Entries the super block counts.
    pub(crate) entries: u64,
    next: u64,
}

impl Log<BufReader<File>> {
    pub(crate) fn open(path: &Path) -> Result<Self, Error> {
        let file = File::open(path)
            .map_err(|e| Error::new(format!("cannot open log {}: {e}", path.display())))?;
        Log::new(BufReader::with_capacity(1 << 20, file))
            .map_err(|e| Error::new(format!("{}: {e}", path.display())))
    }
}

impl<R: Read + Seek> Log<R> {
    /// Reads the super block and positions the reader at the first entry.
    pub(crate) fn new(mut reader: R) -> Result<Self, Error> {
        let mut head = [0u8; 28];
        reader
            .read_exact(&mut head)
            .map_err(|e| Error::new(format!("cannot read the log's super block: {e}")))?;
        let magic = le64(&head[0..8]);
        let version = le64(&head[8..16]);
        let entries = le64(&head[16..24]);
        let sectorsize = u64::from(u32::from_le_bytes([head[24], head[25], head[26], head[27]]));
        if magic != MAGIC {
            return Err(Error::new(format!(
                "not a log-writes log (magic {magic:#x}, wanted {MAGIC:#x})"
            )));
        }
        if version != VERSION {
            return Err(Error::new(format!(
                "log-writes format version {version} (only {VERSION} is known)"
            )));
        }
        if !(512..=65536).contains(&sectorsize) || !sectorsize.is_power_of_two() {
            return Err(Error::new(format!("implausible sector size {sectorsize}")));
        }
        reader
            .seek(SeekFrom::Start(sectorsize))
            .map_err(|e| Error::new(format!("cannot seek in the log: {e}")))?;
        Ok(Log {
            reader,
            sectorsize,
            entries,
            next: 0,
        })
    }

    /// The next entry, or None after the last one the super block counts.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, Error> {
        if self.next == self.entries {
            return Ok(None);
        }
        let index = self.next;
        let broken = |what: String| Error::new(format!("log entry {index}: {what}"));
        let mut header = vec![0u8; usize::try_from(self.sectorsize).unwrap_or(512)];
        self.reader
            .read_exact(&mut header)
            .map_err(|e| broken(format!("cannot read its header: {e}")))?;
        let sector = le64(&header[0..8]);
        let nr_sectors = le64(&header[8..16]);
        let flags = le64(&header[16..24]);
        let data_len = le64(&header[24..32]);
        let mut entry = Entry {
            index,
            sector,
            nr_sectors,
            flags,
            data: Vec::new(),
            mark: None,
        };
        if flags & MARK != 0 {
            let end = usize::try_from(data_len)
                .ok()
                .and_then(|len| len.checked_add(32))
                .filter(|&end| end <= header.len())
                .ok_or_else(|| broken(format!("mark of {data_len} bytes overflows its sector")))?;
            entry.mark = Some(String::from_utf8_lossy(&header[32..end]).into_owned());
        } else if flags & DISCARD == 0 && nr_sectors > 0 {
            let len = nr_sectors
                .checked_mul(self.sectorsize)
                .and_then(|len| usize::try_from(len).ok())
                .filter(|&len| len <= 1 << 30)
                .ok_or_else(|| broken(format!("implausible length of {nr_sectors} sectors")))?;
            entry.data = vec![0u8; len];
            self.reader
                .read_exact(&mut entry.data)
                .map_err(|e| broken(format!("cannot read its {len} bytes of data: {e}")))?;
        }
        self.next += 1;
        Ok(Some(entry))
    }
}

fn le64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Cursor;

    /// Builds a log the way the target lays it out (512-byte sectors).
    pub(crate) fn build(entries: &[(u64, u64, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut out = vec![0u8; 512];
        out[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&(entries.len() as u64).to_le_bytes());
        out[24..28].copy_from_slice(&512u32.to_le_bytes());
        for &(sector, flags, data, mark) in entries {
            let mut header = vec![0u8; 512];
            let nr = if flags & DISCARD != 0 {
                1
            } else {
                data.len() as u64 / 512
            };
            header[0..8].copy_from_slice(&sector.to_le_bytes());
            header[8..16].copy_from_slice(&nr.to_le_bytes());
            header[16..24].copy_from_slice(&flags.to_le_bytes());
            if let Some(text) = mark {
                header[24..32].copy_from_slice(&(text.len() as u64).to_le_bytes());
                header[32..32 + text.len()].copy_from_slice(text.as_bytes());
            }
            out.extend_from_slice(&header);
            if flags & DISCARD == 0 {
                out.extend_from_slice(data);
            }
        }
        out
    }

    fn read_all(bytes: Vec<u8>) -> Result<Vec<Entry>, Error> {
        let mut log = Log::new(Cursor::new(bytes))?;
        let mut all = Vec::new();
        while let Some(entry) = log.next_entry()? {
            all.push(entry);
        }
        Ok(all)
    }

    #[test]
    fn entries_are_read_in_order_with_their_data_marks_and_flags() {
        let block = [7u8; 1024];
        let bytes = build(&[
            (8, 0, &block, None),
            (0, FLUSH, &[], None),
            (100, DISCARD, &[], None),
            (0, MARK, &[], Some("fp:setup")),
            (2, FUA, &block[..512], None),
        ]);
        let all = read_all(bytes).expect("log");
        assert_eq!(all.len(), 5);
        assert_eq!(
            (all[0].sector, all[0].nr_sectors, all[0].data.len()),
            (8, 2, 1024)
        );
        assert!(!all[0].is_flush_point() && all[0].changes_data());
        assert!(all[1].is_flush_point() && !all[1].changes_data());
        assert!(all[2].changes_data() && all[2].data.is_empty());
        assert_eq!(all[3].mark.as_deref(), Some("fp:setup"));
        assert!(!all[3].changes_data());
        assert_eq!((all[4].index, all[4].sector), (4, 2));
        assert!(all[4].is_flush_point());
    }

    #[test]
    fn only_the_entries_the_super_block_counts_are_read() {
        let mut bytes = build(&[(0, FLUSH, &[], None)]);
        // A second entry written after the super block was last updated.
        bytes.extend_from_slice(&build(&[(0, MARK, &[], Some("late"))])[512..]);
        assert_eq!(read_all(bytes).expect("log").len(), 1);
    }

    #[test]
    fn a_foreign_or_truncated_log_is_refused() {
        let mut bytes = build(&[(8, 0, &[1u8; 512], None)]);
        bytes[0] ^= 1;
        let err = read_all(bytes).expect_err("bad magic");
        assert!(err.to_string().contains("not a log-writes log"), "{err}");

        let mut bytes = build(&[(8, 0, &[1u8; 512], None)]);
        bytes.truncate(bytes.len() - 1);
        let err = read_all(bytes).expect_err("truncated");
        assert!(
            err.to_string()
                .contains("log entry 0: cannot read its 512 bytes"),
            "{err}"
        );
    }
}
