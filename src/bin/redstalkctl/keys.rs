//! `redstalkctl key TUBE KEY [--delete]`: a keyed job (docs/EXTENSIONS.md, *Keys*)
//! found, or deleted, by its key. Over the protocol `find-key` (a redstalk extension:
//! beanstalkd answers `UNKNOWN_COMMAND`, exit 3), then `stats-job` or `delete` of the id
//! found; with `--api` `GET` and `DELETE /tubes/{tube}/keys/{key}`.
//!
//! Invariant: the JSON printed has the API's shape on both paths: the job's figures
//! with its `key`, or `{"id", "state": "deleted"}` for a key inside its dedupe window;
//! a delete prints `{"deleted": id}` as `delete` does.

use clap::Args;
use redstalk::http::api::types::{Deleted, KeyAnswer};
use serde_json::{Value, json};

use crate::Ctx;
use crate::api::{Api, seg};
use crate::beanstalk::Beanstalk;
use crate::dict::Dict;
use crate::error::{CtlError, EXIT_OK, Result};
use crate::render::{self, print_json};

#[derive(Args)]
pub struct KeyArgs {
    /// The tube the key is in.
    pub tube: String,
    /// The key a put gave the job (`idp:KEY` or `rpl:KEY`).
    pub key: String,
    /// Delete the key's job (the window its put asked for opens).
    #[arg(long)]
    pub delete: bool,
}

/// What a key names.
enum Found {
    /// The job's figures (with its key).
    Job(Dict),
    /// A job deleted inside the key's dedupe window.
    Window(u64),
}

pub fn key(ctx: &Ctx, a: &KeyArgs) -> Result<u8> {
    if a.delete {
        return delete(ctx, a);
    }
    let found = match ctx.api() {
        Some(api) => find_api(api, a)?,
        None => find_proto(&mut ctx.proto()?, a)?,
    };
    match (found, ctx.json) {
        (Found::Job(f), true) => print_json(&f.to_json()),
        (Found::Job(f), false) => print!("{}", render::key_values(&f)),
        (Found::Window(id), true) => print_json(&json!({ "id": id, "state": "deleted" })),
        (Found::Window(id), false) => println!(
            "key {} of tube {}: job {id} was deleted; the key's dedupe window is open",
            a.key, a.tube
        ),
    }
    Ok(EXIT_OK)
}

fn path(a: &KeyArgs) -> String {
    format!("/tubes/{}/keys/{}", seg(&a.tube), seg(&a.key))
}

fn find_api(api: &Api, a: &KeyArgs) -> Result<Found> {
    Ok(match api.get::<KeyAnswer>(&path(a), &())? {
        KeyAnswer::Job(job) => Found::Job(Dict::of(&job)),
        // Deleted and retained (`--retain`): the record, without its history (`job ID`
        // shows that).
        KeyAnswer::Retained(mut record) => {
            record.history = None;
            Found::Job(Dict::of(&record))
        }
        KeyAnswer::Window(w) => Found::Window(w.id),
    })
}

/// `find-key`, then the job's `stats-job` figures and its key (as the API shows it).
fn find_proto(b: &mut Beanstalk, a: &KeyArgs) -> Result<Found> {
    let (id, state) = b.find_key(&a.tube, &a.key)?;
    if state == "DELETED" {
        return Ok(Found::Window(id));
    }
    let mut figures = b.stats_job(id)?;
    figures.push("key", Value::from(a.key.as_str()));
    Ok(Found::Job(figures))
}

fn delete(ctx: &Ctx, a: &KeyArgs) -> Result<u8> {
    let id = match ctx.api() {
        Some(api) => api.delete::<Deleted>(&path(a))?.deleted,
        None => {
            // `delete-key` does not say which job it deleted, and the key may name
            // another job by the time it runs: the job found is deleted by its id
            // (a keyed job's `delete` opens its window as `delete-key` does).
            let mut b = ctx.proto()?;
            let (id, state) = b.find_key(&a.tube, &a.key)?;
            if state == "DELETED" {
                let what = format!("key {} in tube {}", a.key, a.tube);
                return Err(CtlError::NotFound(format!("{what}: its job is deleted")));
            }
            b.delete(id)?;
            id
        }
    };
    if ctx.json {
        print_json(&json!({ "deleted": id }));
    } else {
        println!("deleted job {id} (key {} of tube {})", a.key, a.tube);
    }
    Ok(EXIT_OK)
}
