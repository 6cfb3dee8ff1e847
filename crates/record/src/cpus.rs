//! CPU lists as users write them (`0,2-3`), shared by every `--pin`-like flag.

/// Errors parsing a CPU list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("empty CPU list; write CPUs like `0,1` or `0-3`")]
    Empty,
    #[error("`{0}` in the CPU list is not a CPU number or range (write `0,1` or `0-3`)")]
    Bad(String),
    #[error("CPU range `{0}` runs backwards")]
    Backwards(String),
    #[error("CPU {cpu} does not exist: this host has CPUs 0-{last}")]
    NoSuchCpu { cpu: usize, last: usize },
}

/// Parse `0,2-3` into `[0, 2, 3]` (order kept, duplicates allowed).
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            continue;
        }
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| CpuListError::Bad(part.to_string()))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if b < a {
                    return Err(CpuListError::Backwards(part.to_string()));
                }
                if b - a > 4096 {
                    return Err(CpuListError::Bad(part.to_string()));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    if cpus.is_empty() {
        return Err(CpuListError::Empty);
    }
    Ok(cpus)
}

/// Check every CPU exists on this host (`cores` logical CPUs).
pub fn check_cpus_exist(cpus: &[usize], cores: usize) -> Result<(), CpuListError> {
    match cpus.iter().find(|&&c| c >= cores) {
        Some(&cpu) => Err(CpuListError::NoSuchCpu {
            cpu,
            last: cores.saturating_sub(1),
        }),
        None => Ok(()),
    }
}

/// A host CPU list as a user writes it (`0,2-3`): the type of every flag
/// that names host CPUs (`--host-cpus`, `smplab vmm --pin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = CpuListError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_cpu_list(s).map(CpuList)
    }
}

impl std::fmt::Display for CpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(usize::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_ranges() {
        assert_eq!(parse_cpu_list("0,2-4"), Ok(vec![0, 2, 3, 4]));
        assert_eq!(parse_cpu_list(" 1 "), Ok(vec![1]));
        assert_eq!(parse_cpu_list(""), Err(CpuListError::Empty));
        assert!(matches!(parse_cpu_list("a"), Err(CpuListError::Bad(_))));
        assert!(matches!(
            parse_cpu_list("3-1"),
            Err(CpuListError::Backwards(_))
        ));
        assert!(matches!(
            parse_cpu_list("0-999999"),
            Err(CpuListError::Bad(_))
        ));
        assert_eq!(
            check_cpus_exist(&[0, 5], 2),
            Err(CpuListError::NoSuchCpu { cpu: 5, last: 1 })
        );
    }
}
