//! Typed access to CSV rows, with errors that name the file, line and field.

use std::collections::HashMap;
use std::str::FromStr;

use csv::StringRecord;

use crate::error::{InputError, Source};
use crate::job::{JobId, MAX_ARRIVAL_SECONDS, Trace};
use crate::limits::{self, Range};

/// One row of a trace, remembering where it came from.
pub(crate) struct Row<'a> {
    pub source: &'a Source,
    pub line: u64,
    pub record: &'a StringRecord,
    pub names: &'a [&'a str],
}

impl Row<'_> {
    /// The raw text of the field `name`.
    pub fn text(&self, name: &str) -> Result<&str, InputError> {
        let index = self.names.iter().position(|n| *n == name).ok_or_else(|| {
            InputError::row(self.source, self.line, format!("no column `{name}`"))
        })?;
        self.record.get(index).map(str::trim).ok_or_else(|| {
            InputError::field(
                self.source,
                self.line,
                name,
                "missing (the row is too short)",
            )
        })
    }

    /// The field `name` parsed as `T`.
    pub fn parse<T: FromStr>(&self, name: &str) -> Result<T, InputError> {
        let text = self.text(name)?;
        text.parse().map_err(|_| {
            InputError::field(
                self.source,
                self.line,
                name,
                format!("`{text}` is not a valid {}", type_word::<T>()),
            )
        })
    }

    /// The field `name` as a number in `range`.
    pub fn number_in(&self, name: &str, range: &Range) -> Result<f64, InputError> {
        let value: f64 = self.parse(name)?;
        range
            .check(value)
            .map_err(|why| InputError::field(self.source, self.line, name, why))
    }

    /// An arrival time: the field `name` (at least 0) times `seconds_per_unit`, no later than
    /// [`MAX_ARRIVAL_SECONDS`].
    pub fn arrival(&self, name: &str, seconds_per_unit: f64) -> Result<f64, InputError> {
        let value: f64 = self.parse(name)?;
        if !(value.is_finite() && value >= 0.0) {
            return Err(InputError::field(
                self.source,
                self.line,
                name,
                format!(
                    "{} is out of range: an arrival is at least 0",
                    limits::number(value)
                ),
            ));
        }
        let seconds = value * seconds_per_unit;
        check_arrival(self.source, self.line, name, seconds).map_err(|e| {
            if seconds_per_unit == 1.0 {
                e
            } else {
                InputError::field(
                    self.source,
                    self.line,
                    name,
                    format!(
                        "{value} units of {seconds_per_unit:e} s is an arrival at {seconds:e} s, after the latest gangway simulates ({MAX_ARRIVAL_SECONDS:e} s); check the rate"
                    ),
                )
            }
        })?;
        Ok(seconds)
    }

    /// A whole number of GPUs, at least one and no more than a cluster may have ([`limits::JOB_GPUS`]).
    pub fn gpu_count(&self, name: &str) -> Result<u32, InputError> {
        let value: u32 = self.parse(name)?;
        if value == 0 {
            return Err(InputError::field(
                self.source,
                self.line,
                name,
                "a job needs at least one GPU",
            ));
        }
        self.whole_in(name, value, &limits::JOB_GPUS)
    }

    /// A batch size in samples, a whole number in [`limits::BATCH`].
    pub fn batch(&self, name: &str) -> Result<u32, InputError> {
        let value: u32 = self.parse(name).map_err(|_| {
            let text = self.text(name).unwrap_or_default();
            InputError::field(
                self.source,
                self.line,
                name,
                format!(
                    "`{text}` is not a whole number of samples ({})",
                    limits::BATCH
                ),
            )
        })?;
        self.whole_in(name, value, &limits::BATCH)
    }

    fn whole_in(&self, name: &str, value: u32, range: &Range) -> Result<u32, InputError> {
        if range.contains(f64::from(value)) {
            return Ok(value);
        }
        // Said as written: a whole number in full, never in exponent form.
        Err(InputError::field(
            self.source,
            self.line,
            name,
            format!("{value} is out of range: {range}"),
        ))
    }
}

/// Checks an arrival time in seconds against [`MAX_ARRIVAL_SECONDS`].
pub(crate) fn check_arrival(
    source: &Source,
    line: u64,
    name: &str,
    seconds: f64,
) -> Result<(), InputError> {
    if seconds <= MAX_ARRIVAL_SECONDS {
        Ok(())
    } else {
        Err(InputError::field(
            source,
            line,
            name,
            format!(
                "an arrival at {seconds:e} s is after the latest gangway simulates ({MAX_ARRIVAL_SECONDS:e} s)"
            ),
        ))
    }
}

/// The job ids a trace's rows carry, with the line of each, so that a repeated id is reported where it
/// repeats instead of one of the two jobs silently disappearing.
#[derive(Default)]
pub(crate) struct JobIds(HashMap<u32, u64>);

impl JobIds {
    /// The field `name` as a job id not seen on an earlier line.
    pub fn take(&mut self, row: &Row<'_>, name: &str) -> Result<JobId, InputError> {
        let id: u32 = row.parse(name)?;
        match self.0.entry(id) {
            std::collections::hash_map::Entry::Occupied(first) => Err(InputError::field(
                row.source,
                row.line,
                name,
                format!("duplicate of line {}", first.get()),
            )),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(row.line);
                Ok(JobId(id))
            }
        }
    }
}

fn type_word<T>() -> &'static str {
    let name = std::any::type_name::<T>();
    if name.starts_with('u') || name.starts_with('i') {
        "whole number"
    } else if name.starts_with('f') {
        "number"
    } else {
        "value"
    }
}

/// Visits every data row of CSV text. `names` are the column names: `None` takes them from a header line.
pub(crate) fn for_each_row(
    source: &Source,
    text: &str,
    delimiter: u8,
    names: Option<&[&str]>,
    mut visit: impl FnMut(&Row<'_>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(names.is_none())
        .flexible(true)
        .from_reader(text.as_bytes());
    let header: Vec<String> = match names {
        Some(n) => n.iter().map(|s| s.to_string()).collect(),
        None => reader
            .headers()
            .map_err(|e| InputError::row(source, 1, e.to_string()))?
            .iter()
            .map(|s| s.trim().to_owned())
            .collect(),
    };
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut record = StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => {
                let line = record.position().map_or(0, |p| p.line());
                if record.iter().all(|f| f.trim().is_empty()) {
                    continue;
                }
                if record.len() != header.len() {
                    return Err(InputError::row(
                        source,
                        line,
                        format!("expected {} fields, found {}", header.len(), record.len()),
                    ));
                }
                visit(&Row {
                    source,
                    line,
                    record: &record,
                    names: &header,
                })?;
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                return Err(InputError::row(source, line, e.to_string()));
            }
        }
    }
}

/// Ends reading a trace: sorts its jobs by arrival (stable: equal arrivals keep file order), numbers
/// them in that order when `renumber` (formats whose rows carry no id), and keeps each job's line,
/// `lines` being the lines of `trace.jobs` as read.
pub(crate) fn finish(
    trace: &mut Trace,
    lines: Vec<u64>,
    columns: super::JobColumns,
    renumber: bool,
) {
    debug_assert_eq!(lines.len(), trace.jobs.len());
    if renumber {
        // File order first, so that each line can follow its job through the sort.
        trace.renumber();
    }
    let mut by_id: HashMap<JobId, u64> = trace.jobs.iter().map(|j| j.id).zip(lines).collect();
    trace.sort_by_arrival();
    if renumber {
        let read_as: Vec<JobId> = trace.jobs.iter().map(|j| j.id).collect();
        trace.renumber();
        by_id = read_as
            .iter()
            .zip(&trace.jobs)
            .filter_map(|(old, job)| Some((job.id, *by_id.get(old)?)))
            .collect();
    }
    trace.rows = Some(super::Rows {
        lines: by_id,
        columns,
    });
}
