//! Properties of `fingerprint_ignore` over generated documents and pointers to places in them:
//! the canonical form with members ignored is the canonical form of the document without them;
//! it does not depend on member order, whitespace, spelling or the order the pointers are
//! listed in, nor on what the ignored members hold; and it canonicalizes to itself.

use proptest::prelude::*;
use proptest::sample::Index;

use super::properties::{any_value, known_value, oracle, rendered, Json};
use idempotency_core::policy::{
    jcs::{self, NotIJson},
    JsonPointer,
};

/// One step from a value to a member or element of it.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Name(String),
    Index(usize),
}

type Path = Vec<Token>;

/// Every place in `value`, parents before their children.
fn places(value: &Json) -> Vec<Path> {
    let mut all = Vec::new();
    collect(value, &mut Vec::new(), &mut all);
    all
}

fn collect(value: &Json, at: &mut Path, all: &mut Vec<Path>) {
    let children: Vec<(Token, &Json)> = match value {
        Json::Array(elements) => (0..).map(Token::Index).zip(elements).collect(),
        Json::Object(members) => members
            .iter()
            .map(|(name, member)| (Token::Name(name.clone()), member))
            .collect(),
        _ => return,
    };
    for (token, child) in children {
        at.push(token);
        all.push(at.clone());
        collect(child, at, all);
        at.pop();
    }
}

/// Up to four places picked from `value`, in the order picked.
fn pick(value: &Json, picks: &[Index]) -> Vec<Path> {
    let all = places(value);
    if all.is_empty() {
        return Vec::new();
    }
    picks
        .iter()
        .map(|i| all[i.index(all.len())].clone())
        .collect()
}

/// RFC 6901 text for a path: `~` written `~0`, `/` written `~1`.
fn pointer_text(path: &[Token]) -> String {
    path.iter()
        .map(|token| match token {
            Token::Name(name) => format!("/{}", name.replace('~', "~0").replace('/', "~1")),
            Token::Index(i) => format!("/{i}"),
        })
        .collect()
}

fn canon(body: &str, ignore: &[Path]) -> Result<String, NotIJson> {
    let pointers: Vec<JsonPointer> = ignore
        .iter()
        .map(|path| JsonPointer::parse(&pointer_text(path)).expect("a rooted pointer"))
        .collect();
    jcs::try_canonicalize(body.as_bytes(), &pointers).map(|c| String::from_utf8(c).unwrap())
}

/// `value` without what the paths name, each resolved against `value` as it is.
fn without(value: &Json, paths: &[Path]) -> Json {
    let named = |token: &Token| paths.iter().any(|p| p.len() == 1 && p[0] == *token);
    let below = |token: &Token| -> Vec<Path> {
        let deeper = paths.iter().filter(|p| p.len() > 1 && p[0] == *token);
        deeper.map(|p| p[1..].to_vec()).collect()
    };
    let child =
        |token: Token, child: &Json| (!named(&token)).then(|| without(child, &below(&token)));
    match value {
        Json::Array(elements) => Json::Array(
            (0..)
                .zip(elements)
                .filter_map(|(i, e)| child(Token::Index(i), e))
                .collect(),
        ),
        Json::Object(members) => Json::Object(
            members
                .iter()
                .filter_map(|(name, v)| Some((name.clone(), child(Token::Name(name.clone()), v)?)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `value` with what `path` names replaced by `replacement`.
fn replaced(value: &Json, path: &[Token], replacement: &Json) -> Json {
    let Some((first, rest)) = path.split_first() else {
        return replacement.clone();
    };
    let child = |token: Token, child: &Json| match token == *first {
        true => replaced(child, rest, replacement),
        false => child.clone(),
    };
    match value {
        Json::Array(elements) => Json::Array(
            (0..)
                .zip(elements)
                .map(|(i, e)| child(Token::Index(i), e))
                .collect(),
        ),
        Json::Object(members) => Json::Object(
            members
                .iter()
                .map(|(name, v)| (name.clone(), child(Token::Name(name.clone()), v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ignoring_gives_the_canonical_form_of_the_document_without_them(
        value in known_value(),
        seed in any::<u64>(),
        picks in prop::collection::vec(any::<Index>(), 0..4),
    ) {
        let ignore = pick(&value, &picks);
        let body = rendered(&value, seed);
        prop_assert_eq!(canon(&body, &ignore), Ok(oracle(&without(&value, &ignore))), "{}", body);
    }

    #[test]
    fn order_spelling_and_pointer_order_do_not_matter_and_the_result_is_canonical(
        value in any_value(),
        seeds in any::<(u64, u64)>(),
        picks in prop::collection::vec(any::<Index>(), 0..4),
    ) {
        let ignore = pick(&value, &picks);
        let mut reversed = ignore.clone();
        reversed.reverse();
        let first = canon(&rendered(&value, seeds.0), &ignore);
        prop_assert!(first.is_ok(), "{:?}", first);
        prop_assert_eq!(&first, &canon(&rendered(&value, seeds.1), &reversed));
        let once = first.unwrap();
        prop_assert_eq!(canon(&once, &[]), Ok(once.clone()));
    }

    #[test]
    fn what_an_ignored_member_holds_does_not_matter(
        value in known_value(),
        replacement in known_value(),
        seed in any::<u64>(),
        picks in prop::collection::vec(any::<Index>(), 1..4),
    ) {
        let ignore = pick(&value, &picks);
        prop_assume!(!ignore.is_empty());
        let changed = replaced(&value, &ignore[0], &replacement);
        prop_assert_eq!(
            canon(&rendered(&value, seed), &ignore),
            canon(&rendered(&changed, seed), &ignore)
        );
    }
}
