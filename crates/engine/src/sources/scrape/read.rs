//! Reading a page: parsed leniently, its engine detected (or configured),
//! its lines kept as the server wrote them and normalised into catalog
//! samples. Pure apart from allocation.

use std::sync::Arc;

use llmwatch_core::catalog::{detect_engine, normalize, Engine};
use llmwatch_core::exposition::{detect_format, parse_lenient, PageTemplate, TemplateSample};
use llmwatch_store::RawSample;

use llmwatch_config::EngineChoice;

use super::fetch::Page;

/// What a page means: its engine, its samples, and whether it was readable.
pub struct Understood {
    pub engine: Engine,
    pub samples: Vec<llmwatch_core::catalog::NormalizedSample>,
    /// Every sample line, as the server wrote it (what the store keeps).
    pub raw: Vec<RawSample>,
    pub families: usize,
    pub parse_errors: Vec<llmwatch_core::exposition::ParseError>,
}

/// Parses and normalises a page. Pure apart from allocation.
pub fn understand(page: &Page, engine: EngineChoice) -> Understood {
    let format = detect_format(page.content_type.as_deref(), &page.body);
    let (exposition, parse_errors) = parse_lenient(&page.body, format);
    let engine = engine_of(engine, &exposition);
    Understood {
        engine,
        samples: normalize(engine, &exposition),
        raw: RawSample::all_of(&exposition),
        families: exposition.families.len(),
        parse_errors,
    }
}

/// What a scrape keeps of a page: every sample line and the engine.
pub struct PageLines {
    pub engine: Engine,
    pub raw: Vec<RawSample>,
    pub families: usize,
    pub parse_errors: Vec<llmwatch_core::exposition::ParseError>,
    /// The page's shape, for reading the next one without parsing (none
    /// when the page had errors or is not written canonically).
    template: Option<Arc<PageTemplate>>,
    /// Read through the last page's template, not parsed.
    pub from_template: bool,
}

/// What a target's last good page leaves for reading the next one.
#[derive(Default)]
pub struct LastPage {
    /// Its lines, whose strings the next page shares.
    raw: Vec<RawSample>,
    engine: Option<Engine>,
    families: usize,
    template: Option<Arc<PageTemplate>>,
}

impl LastPage {
    /// Remembers `lines` (a page that was up) for the next scrape.
    pub fn remember(&mut self, lines: &PageLines) {
        if !lines.from_template {
            // Read through the template, a page has the last one's very
            // strings: nothing to keep.
            self.raw.clone_from(&lines.raw);
        }
        self.engine = Some(lines.engine);
        self.families = lines.families;
        self.template.clone_from(&lines.template);
    }
}

/// Parses a page into its lines without normalising it: the store keeps
/// raw lines and signals are normalised when read, so the scrape path
/// skips the catalog (a fifth of a scrape's instructions). A page of the
/// last page's shape is read through its template (values only, no parse);
/// otherwise lines equal to the same line of the last page share its
/// strings.
pub fn page_lines(page: &Page, engine: EngineChoice, last: &LastPage) -> PageLines {
    let format = detect_format(page.content_type.as_deref(), &page.body);
    if let (Some(template), Some(last_engine)) = (&last.template, last.engine) {
        match template.values(&page.body, format) {
            Some(values) if values.len() == last.raw.len() => {
                let raw = last
                    .raw
                    .iter()
                    .zip(values)
                    .map(|(line, value)| RawSample {
                        name: line.name.clone(),
                        labels: line.labels.clone(),
                        value,
                    })
                    .collect();
                return PageLines {
                    engine: last_engine,
                    raw,
                    families: last.families,
                    parse_errors: Vec::new(),
                    template: Some(template.clone()),
                    from_template: true,
                };
            }
            _ => {}
        }
    }
    let (exposition, parse_errors) = parse_lenient(&page.body, format);
    let raw = RawSample::all_of_like(&exposition, &last.raw);
    let template = if parse_errors.is_empty() {
        PageTemplate::build(
            &page.body,
            format,
            raw.iter().map(|line| TemplateSample {
                name: &line.name,
                labels: &line.labels,
                value: line.value,
            }),
        )
        .map(Arc::new)
    } else {
        None
    };
    PageLines {
        engine: engine_of(engine, &exposition),
        raw,
        families: exposition.families.len(),
        parse_errors,
        template,
        from_template: false,
    }
}

fn engine_of(choice: EngineChoice, page: &llmwatch_core::exposition::Exposition) -> Engine {
    match choice {
        EngineChoice::Fixed(engine) => engine,
        EngineChoice::Auto => detect_engine(page),
    }
}
